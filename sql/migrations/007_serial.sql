-- pam_totp fleet schema, version 7: a hardware token's serial number (totp-enroll import-pskc:
-- the PSKC key's SerialNo, else its Key Id). Not a secret: list_factors shows it to every role
-- that may list the factor. NULL: none (every factor enrolled otherwise, and every one before).

ALTER TABLE pam_totp.factors
  ADD COLUMN serial text NULL CONSTRAINT factors_serial CHECK (serial IS NULL OR octet_length(serial) BETWEEN 1 AND 64);
