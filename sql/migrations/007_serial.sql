-- pam_totp fleet schema, version 7: a hardware token's serial number (totp-enroll import-pskc:
-- the PSKC key's SerialNo, else its Key Id). Not a secret: list_factors shows it to every role
-- that may list the factor. NULL: none (every factor enrolled otherwise, and every one before).
-- Printable text, as totp-enroll checks it: no control character (a host's enroll cannot store
-- one that every status of the user would then carry). A token is one user's: enroll refuses a
-- serial another user's factor has (sql/api.sql).

ALTER TABLE pam_totp.factors
  ADD COLUMN serial text NULL CONSTRAINT factors_serial
    CHECK (serial IS NULL OR (octet_length(serial) BETWEEN 1 AND 64 AND serial !~ '[[:cntrl:]]'));
