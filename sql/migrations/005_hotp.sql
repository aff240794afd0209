-- pam_totp fleet schema, version 5: counter-based factors (HOTP, RFC 4226; docs/ARCHITECTURE.md,
-- section 2.3). A factor of kind 'hotp' keeps in last_step the last counter used (-1: none
-- yet, a token whose first code is counter 0), moved by the same compare-and-set under the
-- user's row lock as a TOTP factor's used step; its look-ahead is the settings row's
-- hotp_window (its period column is unused).

ALTER TABLE pam_totp.factors DROP CONSTRAINT factors_kind;
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_kind CHECK (kind IN ('totp', 'hotp'));
ALTER TABLE pam_totp.factors DROP CONSTRAINT factors_last_step_check;
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_last_step_check
  CHECK (last_step >= 0 OR (kind = 'hotp' AND last_step = -1));
-- No token's counter gets near 2^48 (the Swift side's bound too): a scan stays far from bigint's end.
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_counter_bound CHECK (kind <> 'hotp' OR last_step <= 281474976710656);
ALTER TABLE pam_totp.settings ADD COLUMN hotp_window integer NOT NULL DEFAULT 10 CHECK (hotp_window BETWEEN 1 AND 100);
