-- pam_totp fleet schema, version 3: pg_temp last on every function's search_path.
-- A search_path that does not name pg_temp searches it FIRST for relation and type names
-- (PostgreSQL "Writing SECURITY DEFINER Functions Safely"). Any role with TEMP on the
-- database (PUBLIC has it by default) could create pg_temp.text, a domain whose CHECK calls
-- its own pg_temp function: the SECURITY DEFINER functions below declare `text` variables,
-- so that function ran as their owner and could read every secret. Naming pg_temp last
-- puts it after pg_catalog and pam_totp.
ALTER FUNCTION pam_totp.hotp(bytea,bigint,text,integer) SET search_path = pg_catalog, pam_totp_crypto, pg_temp;
ALTER FUNCTION pam_totp.pbkdf2_sha256(bytea,bytea,integer) SET search_path = pg_catalog, pam_totp_crypto, pg_temp;
ALTER FUNCTION pam_totp.verify_at(text,text,bigint,integer,integer,bigint,boolean) SET search_path = pg_catalog, pam_totp, pam_totp_crypto, pg_temp;
ALTER FUNCTION pam_totp.verify(text,text,integer,integer,bigint,boolean) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.enrolled_uid(text) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.user_status(text) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.list_factors(text) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.check_enrollable(text,bigint,text,bytea) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.enroll(text,bigint,text,text,integer,integer,bigint,bigint,bytea) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.replace_recovery(text,bigint,bigint,integer,bytea,bytea[],text[]) SET search_path = pg_catalog, pam_totp, pam_totp_crypto, pg_temp;
ALTER FUNCTION pam_totp.remove_factor(text,bigint,text,boolean) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.unlock(text) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.purge(text) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.all_status() SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.import_state(text,integer,bigint,bigint) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.import_last_step(text,text,bigint) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.login_at(text,bigint,text,bigint,integer,integer,bigint,boolean) SET search_path = pg_catalog, pam_totp, pg_temp;
ALTER FUNCTION pam_totp.login(text,bigint,text,integer,integer,bigint,boolean) SET search_path = pg_catalog, pam_totp, pg_temp;
