-- pam_totp fleet schema, version 10: clock drift learned in the database, as on a host
-- (docs/FLEET.md, "The window and clock drift"; docs/ARCHITECTURE.md, section 8).
--
-- Each TOTP factor keeps where its device's clock was at its last accepted code, in steps
-- relative to the database's clock, bounded to ±the window in use (so at most ±10, the largest
-- window): TOTPVerifier's rule ("Clock drift"), in sql/api.sql's check_factor. The next check
-- is centred on it; the window keeps its 2N+1 steps. 0: nothing learned (every factor before
-- this version, and always for HOTP, text-message and email factors). An attempt carries the
-- drift its match would teach, and the one it started from, until login_finish records it
-- with the used step. settings.drift_jump_steps: a change of learned drift this large is
-- written to the audit trail (init-database sets it from TOTPVerifier.driftJumpSteps, the
-- host's constant).

ALTER TABLE pam_totp.settings
  ADD COLUMN drift_jump_steps integer NOT NULL DEFAULT 3 CHECK (drift_jump_steps BETWEEN 1 AND 20);

ALTER TABLE pam_totp.factors
  ADD COLUMN drift integer NOT NULL DEFAULT 0
    CONSTRAINT factors_drift CHECK (drift BETWEEN -10 AND 10 AND (kind = 'totp' OR drift = 0));

ALTER TABLE pam_totp.attempts
  ADD COLUMN drift integer NOT NULL DEFAULT 0,
  ADD COLUMN drift_before integer NOT NULL DEFAULT 0;
