-- pam_totp fleet schema, version 6: HOTP resync (docs/ARCHITECTURE.md, section 2.3). A code of
-- a token past its hotp_window but within settings.hotp_resync_window (0: never) is not
-- accepted alone: its attempt's verdict is 'resync', a failure until the next answer of the
-- same login, the token's following code, completes the resync (sql/api.sql: check_factor).

ALTER TABLE pam_totp.attempts DROP CONSTRAINT attempts_verdict_check;
ALTER TABLE pam_totp.attempts ADD CONSTRAINT attempts_verdict_check
  CHECK (verdict IN ('match', 'recovery', 'wrong', 'resync', 'locked', 'unenrolled'));
ALTER TABLE pam_totp.settings ADD COLUMN hotp_resync_window integer NOT NULL DEFAULT 100
  CHECK (hotp_resync_window BETWEEN 0 AND 1000);
