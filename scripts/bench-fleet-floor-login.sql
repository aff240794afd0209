-- scripts/bench-fleet-floor-login.sql: for scripts/bench-fleet.sh only, last, in its throwaway
-- database. Replaces the login procedure pam-totpd calls with one that makes an accepted code's
-- writes (bench_floor.required_writes, scripts/bench-fleet-floor.sql) and none of the checks, and
-- answers success: the same daemon, client and PostgreSQL with only the login's SQL work gone.
-- The procedure runs as its caller (it commits), so the bench's host role gets the tables here.
GRANT USAGE ON SCHEMA pam_totp TO bench_host;
GRANT SELECT, INSERT, UPDATE, DELETE ON pam_totp.users, pam_totp.factors, pam_totp.attempts, pam_totp.audit TO bench_host;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA pam_totp TO bench_host;
GRANT USAGE ON SCHEMA bench_floor TO bench_host;
GRANT EXECUTE ON PROCEDURE bench_floor.required_writes(text) TO bench_host;
CREATE OR REPLACE PROCEDURE pam_totp_api.login(p_user text, p_uid bigint, p_answer text, p_window integer,
                                               p_max_failures integer, p_lockout bigint, p_forward_pass boolean,
                                               INOUT outcome text DEFAULT NULL, INOUT label text DEFAULT NULL,
                                               INOUT step bigint DEFAULT NULL, INOUT digits integer DEFAULT NULL,
                                               INOUT failures integer DEFAULT NULL, INOUT locked_until bigint DEFAULT NULL,
                                               INOUT replayed boolean DEFAULT NULL, INOUT remaining integer DEFAULT NULL,
                                               p_previous text DEFAULT NULL)
LANGUAGE plpgsql
AS $$
BEGIN
  CALL bench_floor.required_writes(p_user);
  outcome := 'success'; label := 'phone'; step := floor(extract(epoch FROM clock_timestamp()) / 30)::bigint; digits := 6;
  failures := 0; locked_until := 0; replayed := false;
END $$;
