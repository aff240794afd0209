-- pam_totp fleet schema, version 1: the tables, the roles and the settings row
-- (docs/ARCHITECTURE.md, section 8). Migrations hold data only and are append-only; every
-- function lives once in sql/api.sql, which init-database drops and re-creates after them.
-- Applied by `pam-totpd init-database --admin CONNINFO` inside one transaction, after the
-- schema `pam_totp` and its table `schema_version` exist: this file runs once per database.
-- It is the unreleased pre-release series 1-8 folded into one (a database that series made is
-- refused: its version 1 has another name).
--
-- Secrets stay in the database: the tables are readable by no login role; host roles get
-- EXECUTE on the API's functions and nothing else.

-- pgcrypto's hmac(), in a schema of its own so the functions can name it on their pinned path.
CREATE SCHEMA IF NOT EXISTS pam_totp_crypto;
REVOKE ALL ON SCHEMA pam_totp_crypto FROM PUBLIC;
DO $$
DECLARE where_ text;
BEGIN
  SELECT n.nspname INTO where_ FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
   WHERE e.extname = 'pgcrypto';
  IF where_ IS NULL THEN
    CREATE EXTENSION pgcrypto WITH SCHEMA pam_totp_crypto;
  ELSIF where_ <> 'pam_totp_crypto' THEN
    RAISE EXCEPTION 'pgcrypto is installed in schema %, pam_totp needs it in pam_totp_crypto (ALTER EXTENSION pgcrypto SET SCHEMA pam_totp_crypto)', where_;
  END IF;
END $$;

-- The two roles a DBA grants to hosts' and admins' login roles. NOLOGIN: nobody logs in as them.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pam_totp_host') THEN
    CREATE ROLE pam_totp_host NOLOGIN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pam_totp_admin') THEN
    CREATE ROLE pam_totp_admin NOLOGIN;
  END IF;
END $$;

-- Limits the database enforces whatever a host asks for (a host may only be stricter).
CREATE TABLE pam_totp.settings (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  max_window integer NOT NULL DEFAULT 1 CHECK (max_window BETWEEN 0 AND 10),
  max_failures integer NOT NULL DEFAULT 10 CHECK (max_failures BETWEEN 1 AND 100),
  min_lockout bigint NOT NULL DEFAULT 300 CHECK (min_lockout BETWEEN 0 AND 86400)
);
INSERT INTO pam_totp.settings DEFAULT VALUES;

CREATE TABLE pam_totp.users (
  name text PRIMARY KEY CHECK (name ~ '^[!-~]{1,255}$' AND name !~ '^[.]' AND position('/' in name) = 0),
  uid bigint NOT NULL CHECK (uid BETWEEN 0 AND 4294967295),
  failures integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
  locked_until bigint NOT NULL DEFAULT 0,
  -- A host changes an enrolled user's factors or recovery codes only after that user proved
  -- themselves through it: the login role whose session last had a code of the user
  -- accepted, and until when that counts.
  proof_role name,
  proof_until bigint NOT NULL DEFAULT 0
);

CREATE TABLE pam_totp.factors (
  id bigserial PRIMARY KEY,                 -- record order: the first factor that matches wins
  user_name text NOT NULL REFERENCES pam_totp.users(name) ON DELETE CASCADE,
  label text NOT NULL CHECK (octet_length(label) BETWEEN 1 AND 64),
  algorithm text NOT NULL CHECK (algorithm IN ('sha1', 'sha256', 'sha512')),
  digits integer NOT NULL CHECK (digits IN (6, 8)),
  period integer NOT NULL CHECK (period BETWEEN 1 AND 3600),
  created bigint NOT NULL,
  last_step bigint NOT NULL CHECK (last_step >= 0),  -- this step and every earlier one are used
  secret bytea NOT NULL CHECK (octet_length(secret) BETWEEN 10 AND 128),
  UNIQUE (user_name, label)
);

CREATE TABLE pam_totp.recovery (
  user_name text PRIMARY KEY REFERENCES pam_totp.users(name) ON DELETE CASCADE,
  set_id bigint NOT NULL,
  iterations integer NOT NULL CHECK (iterations BETWEEN 1000 AND 100000),
  salt bytea NOT NULL CHECK (octet_length(salt) BETWEEN 8 AND 64),
  hashes bytea[] NOT NULL CHECK (cardinality(hashes) BETWEEN 1 AND 32),
  used bigint NOT NULL DEFAULT 0            -- bit i: code i is used
);

REVOKE ALL ON ALL TABLES IN SCHEMA pam_totp FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA pam_totp FROM PUBLIC;

