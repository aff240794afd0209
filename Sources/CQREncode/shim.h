// CQREncode: libqrencode (Debian libqrencode-dev). Only totp-enroll imports it.
#ifndef PAM_TOTP_CQRENCODE_SHIM_H
#define PAM_TOTP_CQRENCODE_SHIM_H
#include <qrencode.h>
#endif
