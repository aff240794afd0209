-- A host's identity is its own credential (docs/ARCHITECTURE.md, section 4, rule 20; docs/FLEET.md,
-- "Through a pooler"): a pool may map every host to one login role, so the database names the
-- caller by a per-host key an admin registered (pam-totpd add-host), checked on every call
-- (pam_totp_api.identify), not by the connection's role. Revoked at once by remove-host.

-- A login role that stands for many hosts (PgBouncer's one server role): a member may call
-- nothing without a host credential. It has what pam_totp_host has.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pam_totp_pooled') THEN
    CREATE ROLE pam_totp_pooled NOLOGIN;
  END IF;
END $$;
GRANT pam_totp_host TO pam_totp_pooled;

-- One row per host ever added. key: 32 random bytes, made by the database (never sent to it,
-- so no statement log holds one); NULL once removed: a removed name is refused with or
-- without a credential until it is added again (with a new key).
CREATE TABLE pam_totp.hosts (
  name name PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
  key bytea CHECK (octet_length(key) = 32),
  added bigint NOT NULL,
  removed bigint,
  CHECK ((key IS NULL) = (removed IS NOT NULL))
);
REVOKE ALL ON pam_totp.hosts FROM PUBLIC;

-- The nonces of calls accepted in the last two minutes (a credential's time stamp may be 60 s
-- off the database's clock either way): each credential is accepted once.
CREATE TABLE pam_totp.host_nonces (
  host name NOT NULL,
  nonce bytea NOT NULL,
  at bigint NOT NULL,
  PRIMARY KEY (host, nonce)
);
-- BRIN: rows come in the order of at, and a summary per block range costs an insert almost
-- nothing (the sweep reads a few ranges).
CREATE INDEX host_nonces_at ON pam_totp.host_nonces USING brin (at);
REVOKE ALL ON pam_totp.host_nonces FROM PUBLIC;

-- A two-step login or enrolment began with a credential is finished with another of the same
-- host, made over the first one's nonce (kept here, in hex).
ALTER TABLE pam_totp.attempts ADD COLUMN nonce text;
ALTER TABLE pam_totp.enrolment_attempts ADD COLUMN nonce text;

-- add-host and remove-host are in the audit trail (account: the host's name).
ALTER TABLE pam_totp.audit DROP CONSTRAINT audit_event_check;
ALTER TABLE pam_totp.audit ADD CONSTRAINT audit_event_check
  CHECK (event IN ('success', 'recovery', 'failure', 'locked', 'unfinished', 'enroll', 'recovery-codes', 'remove', 'unlock',
                   'purge', 'import', 'code-sent', 'code-not-sent', 'host-added', 'host-removed'));
