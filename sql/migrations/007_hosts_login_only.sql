-- pam_totp fleet schema, version 7: a host verifies only through login, bound to a uid.
-- verify (version 1's entry point) takes a name and no uid: it checks the code of whatever
-- record holds that name, whichever account the record was enrolled for. Since version 2 a
-- login is one call of `login`, which checks the record's uid; pam-totpd's lookup-then-
-- authenticate path now calls `login` too, with the uid its lookup saw (enrolled_uid). No
-- host or admin needs verify any more: it stays for the owner (and verify_at, which login_at
-- calls as the owner). enrolled_uid stays granted: pam-totpd's lookup and start-up check
-- call it.
REVOKE EXECUTE ON FUNCTION pam_totp.verify(text, text, integer, integer, bigint, boolean) FROM pam_totp_host, pam_totp_admin;
REVOKE ALL ON FUNCTION pam_totp.verify(text, text, integer, integer, bigint, boolean) FROM PUBLIC;
