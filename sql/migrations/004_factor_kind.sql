-- pam_totp fleet schema, version 4: each factor's kind (docs/ARCHITECTURE.md, section 2.3).
--
-- Every factor so far is a TOTP factor. What differs by kind is dispatched once, in
-- sql/api.sql's check_factor (verification) and list_factors (listing); a new kind widens
-- this CHECK and adds the columns it needs in a migration of its own.

ALTER TABLE pam_totp.factors
  ADD COLUMN kind text NOT NULL DEFAULT 'totp' CONSTRAINT factors_kind CHECK (kind IN ('totp'));
