// libpq (Debian: libpq-dev), for pam-totpd's PostgreSQL backend only: pam_totp.so never
// links it (docs/ARCHITECTURE.md, section 8).
#include <postgresql/libpq-fe.h>
