-- pam_totp fleet schema, version 3: the audit trail (docs/ARCHITECTURE.md, section 8).
--
-- Who logged in where, who was locked out, and who enrolled, removed, made recovery codes,
-- unlocked, purged or imported: one row per event, written by the API's functions in the
-- transaction that made the change (sql/api.sql: audit_append), so a change and its row
-- commit together or not at all. Rows are only appended: no login role may read or change
-- the table; pam_totp_admin reads it through audit_trail. Never a code, secret or hash.
-- Rows older than settings.audit_days are deleted a few at a time as new ones are written.

ALTER TABLE pam_totp.settings
  ADD COLUMN audit_days integer NOT NULL DEFAULT 365 CHECK (audit_days BETWEEN 1 AND 36500);

CREATE TABLE pam_totp.audit (
  id bigserial PRIMARY KEY,
  at bigint NOT NULL,                       -- the database's clock, Unix seconds
  role name NOT NULL,                       -- the session_user: the host's (or admin's) login role
  account text NOT NULL,
  uid bigint,
  event text NOT NULL CHECK (event IN ('success', 'recovery', 'failure', 'locked', 'unfinished',
                                       'enroll', 'recovery-codes', 'remove', 'unlock', 'purge', 'import')),
  label text,                               -- the factor, where there is one
  failures integer,                         -- consecutive failures after the event
  locked_until bigint,                      -- a lockout the event started (failure) or met (locked)
  detail text                               -- e.g. "replayed", "9 left": never a code or secret
);
CREATE INDEX audit_at ON pam_totp.audit (at);
CREATE INDEX audit_account ON pam_totp.audit (account, id);
REVOKE ALL ON pam_totp.audit FROM PUBLIC;
REVOKE ALL ON SEQUENCE pam_totp.audit_id_seq FROM PUBLIC;
