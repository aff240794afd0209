-- pam_totp fleet schema, version 5: standard_conforming_strings pinned on every function.
-- PL/pgSQL bodies are compiled in the caller's session, with its settings. A host that ran
-- SET standard_conforming_strings = off made '\x00000001'::bytea in pbkdf2_sha256 (and the
-- decoy key in login_at) an escape string holding a NUL byte: the compilation fails. In
-- verify_at that failure came after the factors were checked and before the failure was
-- counted, on every wrong answer shaped like a recovery code (8 to 32 digits) of a user with
-- recovery codes: a host could guess the codes of an 8-digit factor without limit (a right
-- one still succeeded). Pinned here, the bodies always read as written.
ALTER FUNCTION pam_totp.hotp(bytea,bigint,text,integer) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.pbkdf2_sha256(bytea,bytea,integer) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.verify_at(text,text,bigint,integer,integer,bigint,boolean) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.verify(text,text,integer,integer,bigint,boolean) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.enrolled_uid(text) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.user_status(text) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.list_factors(text) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.check_enrollable(text,bigint,text,bytea) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.enroll(text,bigint,text,text,integer,integer,bigint,bigint,bytea) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.replace_recovery(text,bigint,bigint,integer,bytea,bytea[],text[]) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.remove_factor(text,bigint,text,boolean) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.unlock(text) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.purge(text) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.all_status() SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.import_state(text,integer,bigint,bigint) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.import_last_step(text,text,bigint) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.login_at(text,bigint,text,bigint,integer,integer,bigint,boolean) SET standard_conforming_strings = on;
ALTER FUNCTION pam_totp.login(text,bigint,text,integer,integer,bigint,boolean) SET standard_conforming_strings = on;
