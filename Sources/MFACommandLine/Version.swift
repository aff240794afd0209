/// The release this tree is (NEWS): `totp-enroll --version`, `pam-totpd --version`, and the
/// Debian package's version (the Makefile reads it from here).
public let packageVersion = "0.1.0"
