-- Text-message and email factors (docs/ARCHITECTURE.md, section 2.3; docs/FLEET.md, "Text-message
-- and email codes"): a factor of kind sms or email holds a destination instead of a secret. The
-- database makes each code, keeps only its salted SHA-256 for the check (sent_codes, and
-- enrolment_codes for a factor not saved yet), counts the sends fleet-wide (sends) and hands the
-- message to the outbox, which only the role pam_totp_sender reads (through outbox_claim).
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pam_totp_sender') THEN
    CREATE ROLE pam_totp_sender NOLOGIN;
  END IF;
END $$;

ALTER TABLE pam_totp.factors DROP CONSTRAINT factors_kind;
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_kind CHECK (kind IN ('totp', 'hotp', 'sms', 'email'));
ALTER TABLE pam_totp.factors ALTER COLUMN secret DROP NOT NULL;
ALTER TABLE pam_totp.factors ADD COLUMN destination text NULL;
-- A phone: E.164 (+, 8-15 digits, the first not 0). An address: the conservative form
-- MFAPolicy's Destination accepts (ASCII, no quotes, brackets or IP literals, not starting with
-- - | / or a dot). Either way printable ASCII, so a mask of it is too.
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_destination CHECK (coalesce(
  CASE kind
    WHEN 'sms' THEN secret IS NULL AND destination ~ '^[+][1-9][0-9]{7,14}$'
    WHEN 'email' THEN secret IS NULL AND octet_length(destination) <= 254
      AND destination ~ '^[A-Za-z0-9!#$%&''*+=?^_`{}~][A-Za-z0-9!#$%&''*+/=?^_`{|}~.-]{0,63}@[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$'
    ELSE secret IS NOT NULL AND destination IS NULL
  END, false));

ALTER TABLE pam_totp.settings
  ADD COLUMN oob_digits integer NOT NULL DEFAULT 6 CHECK (oob_digits BETWEEN 6 AND 8),
  ADD COLUMN oob_lifetime bigint NOT NULL DEFAULT 300 CHECK (oob_lifetime BETWEEN 30 AND 3600),
  ADD COLUMN oob_max_attempts integer NOT NULL DEFAULT 3 CHECK (oob_max_attempts BETWEEN 1 AND 10),
  ADD COLUMN oob_resend_interval bigint NOT NULL DEFAULT 30 CHECK (oob_resend_interval BETWEEN 0 AND 3600),
  ADD COLUMN oob_max_per_hour integer NOT NULL DEFAULT 5 CHECK (oob_max_per_hour BETWEEN 1 AND 32),
  ADD COLUMN oob_max_per_day integer NOT NULL DEFAULT 20 CHECK (oob_max_per_day BETWEEN 1 AND 32),
  ADD COLUMN oob_max_per_minute integer NOT NULL DEFAULT 60 CHECK (oob_max_per_minute BETWEEN 1 AND 10000);

-- The message queue. code: the code in clear until a deliverer claims the row (or it expires);
-- then NULL. A claimed row is never handed out again: at most once.
CREATE TABLE pam_totp.outbox (
  id bigserial PRIMARY KEY,
  user_name text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('sms', 'email')),
  destination text NOT NULL,
  code text CHECK (code ~ '^[0-9]{6,8}$'),
  host text NOT NULL,                       -- %h: the host the code was asked for on
  minutes integer NOT NULL,                 -- %m: how long it is valid
  queued bigint NOT NULL,
  expires_at bigint NOT NULL,
  claimed_at bigint,
  claimed_by name,
  done_at bigint,
  outcome text CHECK (outcome IN ('sent', 'failed', 'expired'))
);
CREATE INDEX outbox_waiting ON pam_totp.outbox (id) WHERE claimed_at IS NULL;
CREATE INDEX outbox_queued ON pam_totp.outbox (queued);

-- One outstanding login code per user (a new send replaces it). id: its outbox row; a match is
-- "step" id (factors.last_step: used once, compare-and-set).
CREATE TABLE pam_totp.sent_codes (
  user_name text PRIMARY KEY REFERENCES pam_totp.users(name) ON DELETE CASCADE,
  id bigint NOT NULL,
  factor_id bigint NOT NULL REFERENCES pam_totp.factors(id) ON DELETE CASCADE,
  digits integer NOT NULL CHECK (digits BETWEEN 6 AND 8),
  salt bytea NOT NULL,
  hash bytea NOT NULL,
  sent_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  attempts_left integer NOT NULL CHECK (attempts_left >= 0)
);

-- One outstanding enrolment code per user: the factor to save once it is typed back.
CREATE TABLE pam_totp.enrolment_codes (
  user_name text PRIMARY KEY,
  uid bigint NOT NULL,
  id bigint NOT NULL,
  label text NOT NULL CHECK (octet_length(label) BETWEEN 1 AND 64),
  kind text NOT NULL CHECK (kind IN ('sms', 'email')),
  destination text NOT NULL,
  digits integer NOT NULL CHECK (digits BETWEEN 6 AND 8),
  salt bytea NOT NULL,
  hash bytea NOT NULL,
  sent_at bigint NOT NULL,
  expires_at bigint NOT NULL,
  attempts_left integer NOT NULL CHECK (attempts_left >= 0)
);

-- A code typed back at an enrolment, counted before its verdict is told (confirm_enrolment_begin
-- and _finish, as login_begin and login_finish): matched says whether it was the code; the factor
-- to save is copied here, since the attempt may have used up the outstanding code.
CREATE TABLE pam_totp.enrolment_attempts (
  id bigserial PRIMARY KEY,
  role name NOT NULL,
  xact xid8 NOT NULL,
  begun bigint NOT NULL,
  user_name text NOT NULL,
  uid bigint NOT NULL,
  matched boolean NOT NULL,
  label text NOT NULL,
  kind text NOT NULL,
  destination text NOT NULL,
  created bigint NOT NULL,
  attempts_left integer NOT NULL
);

-- Every send, for the limits (per account: resend interval, hour, day; fleet-wide: minute).
CREATE TABLE pam_totp.sends (
  id bigserial PRIMARY KEY,
  user_name text NOT NULL,
  at bigint NOT NULL
);
CREATE INDEX sends_user ON pam_totp.sends (user_name, at);
CREATE INDEX sends_at ON pam_totp.sends (at);

ALTER TABLE pam_totp.audit DROP CONSTRAINT audit_event_check;
ALTER TABLE pam_totp.audit ADD CONSTRAINT audit_event_check
  CHECK (event IN ('success', 'recovery', 'failure', 'locked', 'unfinished', 'enroll', 'recovery-codes', 'remove', 'unlock',
                   'purge', 'import', 'code-sent', 'code-not-sent'));

REVOKE ALL ON pam_totp.outbox, pam_totp.sent_codes, pam_totp.enrolment_codes, pam_totp.enrolment_attempts, pam_totp.sends FROM PUBLIC;
REVOKE ALL ON SEQUENCE pam_totp.outbox_id_seq, pam_totp.sends_id_seq, pam_totp.enrolment_attempts_id_seq FROM PUBLIC;
