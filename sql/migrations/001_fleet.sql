-- pam_totp fleet schema, version 1 (docs/ARCHITECTURE.md, section 8, README "Fleet").
-- Applied by `pam-totpd init-database --admin CONNINFO` inside one transaction, after the
-- schema `pam_totp` and its table `schema_version` exist. Idempotent only through
-- schema_version: this file runs once per database.
--
-- Secrets stay in the database: the tables are readable by no login role; host roles get
-- EXECUTE on the functions below and nothing else, and no function returns a secret, a
-- recovery-code hash or a salt. Verification (HMAC over the whole window, compare,
-- compare-and-set of the last used step under a row lock, failure count, lockout, the
-- 100-failure cap) runs here, in SECURITY DEFINER functions with a pinned search_path.

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
  locked_until bigint NOT NULL DEFAULT 0
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

-- HOTP (RFC 4226) value of `counter`: HMAC, dynamic truncation, modulo 10^digits.
CREATE FUNCTION pam_totp.hotp(secret bytea, counter bigint, algorithm text, digits integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pam_totp_crypto
AS $$
  SELECT ((((get_byte(mac, o) & 127)::bigint << 24) | (get_byte(mac, o + 1) << 16)
          | (get_byte(mac, o + 2) << 8) | get_byte(mac, o + 3)) % (CASE digits WHEN 8 THEN 100000000 ELSE 1000000 END))::integer
  FROM (SELECT pam_totp_crypto.hmac(int8send(counter), secret, algorithm) AS mac) h,
       LATERAL (SELECT get_byte(h.mac, octet_length(h.mac) - 1) & 15 AS o) t
$$;

-- PBKDF2-HMAC-SHA-256 (RFC 8018), one 32-byte block: how recovery codes are stored.
CREATE FUNCTION pam_totp.pbkdf2_sha256(password bytea, salt bytea, iterations integer) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pam_totp_crypto
AS $$
DECLARE
  u bytea := pam_totp_crypto.hmac(salt || '\x00000001'::bytea, password, 'sha256');
  acc bit(256) := ('x' || encode(u, 'hex'))::bit(256);
BEGIN
  FOR i IN 2..iterations LOOP
    u := pam_totp_crypto.hmac(u, password, 'sha256');
    acc := acc # ('x' || encode(u, 'hex'))::bit(256);
  END LOOP;
  RETURN decode(lpad(to_hex(substring(acc from 1 for 32)::integer), 8, '0') || lpad(to_hex(substring(acc from 33 for 32)::integer), 8, '0')
             || lpad(to_hex(substring(acc from 65 for 32)::integer), 8, '0') || lpad(to_hex(substring(acc from 97 for 32)::integer), 8, '0')
             || lpad(to_hex(substring(acc from 129 for 32)::integer), 8, '0') || lpad(to_hex(substring(acc from 161 for 32)::integer), 8, '0')
             || lpad(to_hex(substring(acc from 193 for 32)::integer), 8, '0') || lpad(to_hex(substring(acc from 225 for 32)::integer), 8, '0'), 'hex');
END $$;

-- One login: the whole verdict in one transaction under the user's row lock. Every factor's
-- whole window is computed (no early exit); a step is accepted only above the factor's stored
-- last step, and is stored in the same transaction as the failure count and lockout.
-- `p_now` is the caller's clock: only the owner and tests call this; hosts call `verify`,
-- which uses the database's clock.
CREATE FUNCTION pam_totp.verify_at(p_user text, p_answer text, p_now bigint, p_window integer,
                                   p_max_failures integer, p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pam_totp_crypto
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  u pam_totp.users%ROWTYPE;
  f record;
  r pam_totp.recovery%ROWTYPE;
  win integer; maxf integer; lock_for bigint;
  code text; wanted bigint; now_step bigint; s bigint; v integer;
  m_id bigint; m_label text; m_step bigint; m_digits integer;
  rep boolean := false;
  digits_only text; h bytea; rec_index integer; left_ integer := 0;
  fails integer; until_ bigint;
BEGIN
  IF p_user IS NULL OR p_answer IS NULL OR p_now IS NULL OR p_now < 0 THEN
    RAISE EXCEPTION 'verify: bad arguments';
  END IF;
  SELECT * INTO cfg FROM pam_totp.settings;
  win := least(greatest(coalesce(p_window, 0), 0), cfg.max_window);
  maxf := least(greatest(coalesce(p_max_failures, cfg.max_failures), 1), cfg.max_failures);
  lock_for := least(greatest(coalesce(p_lockout, 0), cfg.min_lockout), 86400);

  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND THEN
    RETURN QUERY SELECT 'unenrolled'::text, NULL::text, NULL::bigint, NULL::integer, 0, 0::bigint, false, NULL::integer;
    RETURN;
  END IF;

  FOR f IN SELECT x.id, x.label, x.algorithm, x.digits, x.period, x.last_step, x.secret
             FROM pam_totp.factors x WHERE x.user_name = p_user ORDER BY x.id LOOP
    code := CASE WHEN p_forward_pass THEN right(p_answer, f.digits) ELSE p_answer END;
    wanted := CASE WHEN octet_length(code) = f.digits AND code ~ '^[0-9]+$' THEN code::bigint ELSE -1 END;
    now_step := p_now / f.period;
    FOR s IN greatest(now_step - win, 0) .. now_step + win LOOP
      v := pam_totp.hotp(f.secret, s, f.algorithm, f.digits);
      IF v = wanted THEN
        IF s > f.last_step THEN
          IF m_id IS NULL THEN m_id := f.id; m_label := f.label; m_step := s; m_digits := f.digits; END IF;
        ELSE
          rep := true;
        END IF;
      END IF;
    END LOOP;
  END LOOP;

  -- A recovery-code-shaped answer that matched no factor: one PBKDF2, then every stored hash.
  IF m_id IS NULL AND NOT p_forward_pass AND p_answer ~ '^[0-9 -]+$' THEN
    digits_only := regexp_replace(p_answer, '[ -]', '', 'g');
    IF length(digits_only) BETWEEN 8 AND 32 THEN
      SELECT * INTO r FROM pam_totp.recovery WHERE user_name = p_user;
      IF FOUND THEN
        h := pam_totp.pbkdf2_sha256(convert_to(digits_only, 'UTF8'), r.salt, r.iterations);
        FOR i IN 1 .. cardinality(r.hashes) LOOP
          IF r.hashes[i] = h AND (i > 32 OR (r.used >> (i - 1)) & 1 = 0) AND rec_index IS NULL THEN
            rec_index := i - 1;
          END IF;
        END LOOP;
      END IF;
    END IF;
  END IF;

  IF u.failures >= 100 THEN
    RETURN QUERY SELECT 'locked'::text, NULL::text, NULL::bigint, NULL::integer, u.failures, 9223372036854775807::bigint, false, NULL::integer;
    RETURN;
  END IF;
  IF p_now < u.locked_until THEN
    RETURN QUERY SELECT 'locked'::text, NULL::text, NULL::bigint, NULL::integer, u.failures, u.locked_until, false, NULL::integer;
    RETURN;
  END IF;

  IF m_id IS NOT NULL THEN
    UPDATE pam_totp.factors SET last_step = m_step WHERE id = m_id AND last_step < m_step;
    IF NOT FOUND THEN RAISE EXCEPTION 'verify: the step moved under the lock'; END IF;
    UPDATE pam_totp.users SET failures = 0, locked_until = 0 WHERE name = p_user;
    RETURN QUERY SELECT 'success'::text, m_label, m_step, m_digits, 0, 0::bigint, false, NULL::integer;
    RETURN;
  END IF;
  IF rec_index IS NOT NULL THEN
    UPDATE pam_totp.recovery SET used = used | (1::bigint << rec_index) WHERE user_name = p_user;
    UPDATE pam_totp.users SET failures = 0, locked_until = 0 WHERE name = p_user;
    SELECT count(*) INTO left_ FROM generate_series(0, cardinality(r.hashes) - 1) i
     WHERE i >= 32 OR ((r.used | (1::bigint << rec_index)) >> i) & 1 = 0;
    RETURN QUERY SELECT 'recovery'::text, NULL::text, NULL::bigint, NULL::integer, 0, 0::bigint, false, left_;
    RETURN;
  END IF;

  fails := u.failures + 1;
  until_ := 0;
  IF lock_for > 0 AND fails % maxf = 0 THEN until_ := p_now + lock_for; END IF;
  UPDATE pam_totp.users SET failures = fails, locked_until = CASE WHEN until_ > 0 THEN until_ ELSE pam_totp.users.locked_until END
   WHERE name = p_user;
  RETURN QUERY SELECT 'wrong'::text, NULL::text, NULL::bigint, NULL::integer, fails, until_, rep, NULL::integer;
END $$;

-- What a host calls: verify_at on the database's clock, so no host can pick the time.
CREATE FUNCTION pam_totp.verify(p_user text, p_answer text, p_window integer, p_max_failures integer,
                                p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT * FROM pam_totp.verify_at(p_user, p_answer, floor(extract(epoch FROM clock_timestamp()))::bigint,
                                   p_window, p_max_failures, p_lockout, p_forward_pass)
$$;

-- Before the prompt: the uid the user's enrolment is bound to, or NULL if not enrolled.
CREATE FUNCTION pam_totp.enrolled_uid(p_user text) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT u.uid FROM pam_totp.users u WHERE u.name = p_user AND EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = u.name)
$$;

-- A user's metadata: no secret, no hash, no salt.
CREATE FUNCTION pam_totp.user_status(p_user text)
RETURNS TABLE (uid bigint, failures integer, locked_until bigint, recovery_set bigint, recovery_codes integer, recovery_used bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT u.uid, u.failures, u.locked_until, r.set_id, cardinality(r.hashes), r.used
    FROM pam_totp.users u LEFT JOIN pam_totp.recovery r ON r.user_name = u.name WHERE u.name = p_user
$$;

CREATE FUNCTION pam_totp.list_factors(p_user text)
RETURNS TABLE (label text, algorithm text, digits integer, period integer, created bigint, last_step bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT f.label, f.algorithm, f.digits, f.period, f.created, f.last_step FROM pam_totp.factors f
   WHERE f.user_name = p_user ORDER BY f.id
$$;

-- The checks an enrolment makes (label unique, secret unique, at most 32, same account).
-- p_secret NULL: the secret is not known yet. Raises with a message for the user.
CREATE FUNCTION pam_totp.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
DECLARE u pam_totp.users%ROWTYPE;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user;
  IF NOT FOUND THEN RETURN; END IF;
  IF u.uid <> p_uid THEN
    RAISE EXCEPTION 'the stored record of this name belongs to another account (another uid): root must run totp-enroll purge --user NAME first' USING ERRCODE = 'P0001';
  END IF;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND label = p_label) THEN
    RAISE EXCEPTION 'a factor with this name already exists; choose another name' USING ERRCODE = 'P0001';
  END IF;
  IF (SELECT count(*) FROM pam_totp.factors WHERE user_name = p_user) >= 32 THEN
    RAISE EXCEPTION 'too many factors (32); remove one first' USING ERRCODE = 'P0001';
  END IF;
  IF p_secret IS NOT NULL AND EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND secret = p_secret) THEN
    RAISE EXCEPTION 'this secret is already enrolled as another factor' USING ERRCODE = 'P0001';
  END IF;
END $$;

-- Adds a proven factor (its enrolment step and every earlier one count as used). Write-only:
-- the secret goes in and never comes out.
CREATE FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer,
                                p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
BEGIN
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  PERFORM pam_totp.check_enrollable(p_user, p_uid, p_label, p_secret);
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret)
  VALUES (p_user, p_label, p_algorithm, p_digits, p_period, p_created, p_enrolled_step, p_secret);
END $$;

-- Replaces the user's recovery codes (hashed by the caller: PBKDF2-HMAC-SHA-256). With
-- p_keep_used, codes of the old set that were used stay used (an import never revives one):
-- returns how many of the new hashes were left out for that reason. Returns -1 if no set was
-- there before, else the number left out.
CREATE FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer,
                                          p_salt bytea, p_hashes bytea[], p_codes text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pam_totp_crypto
AS $$
DECLARE
  u pam_totp.users%ROWTYPE;
  old pam_totp.recovery%ROWTYPE;
  had boolean;
  keep bytea[] := '{}';
  left_out integer := 0;
  h bytea;
  used_before boolean;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND OR u.uid <> p_uid OR NOT EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    RAISE EXCEPTION 'no factor yet: enrol one first (totp-enroll), then make recovery codes' USING ERRCODE = 'P0001';
  END IF;
  SELECT * INTO old FROM pam_totp.recovery WHERE user_name = p_user;
  had := FOUND;
  IF had AND p_codes IS NOT NULL THEN
    -- The plain codes of an import: each one the old set holds as used is left out.
    FOR i IN 1 .. cardinality(p_codes) LOOP
      h := pam_totp.pbkdf2_sha256(convert_to(p_codes[i], 'UTF8'), old.salt, old.iterations);
      used_before := false;
      FOR j IN 1 .. least(cardinality(old.hashes), 32) LOOP
        IF old.hashes[j] = h AND (old.used >> (j - 1)) & 1 = 1 THEN used_before := true; END IF;
      END LOOP;
      IF used_before THEN left_out := left_out + 1; ELSE keep := keep || p_hashes[i]; END IF;
    END LOOP;
  ELSE
    keep := p_hashes;
  END IF;
  DELETE FROM pam_totp.recovery WHERE user_name = p_user;
  IF cardinality(keep) > 0 THEN
    INSERT INTO pam_totp.recovery (user_name, set_id, iterations, salt, hashes, used)
    VALUES (p_user, p_set_id, p_iterations, p_salt, keep, 0);
  END IF;
  RETURN CASE WHEN had THEN left_out ELSE -1 END;
END $$;

-- Removes one factor; returns how many are left. Only p_may_remove_last (root) removes the
-- last one, and with it the user.
CREATE FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
DECLARE u pam_totp.users%ROWTYPE; n integer;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND OR u.uid <> p_uid OR NOT EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND label = p_label) THEN
    RAISE EXCEPTION 'no factor with that label (see totp-enroll list)' USING ERRCODE = 'P0001';
  END IF;
  SELECT count(*) INTO n FROM pam_totp.factors WHERE user_name = p_user;
  IF n <= 1 AND NOT p_may_remove_last THEN
    RAISE EXCEPTION 'this is your last factor: enrol another one first (only root can remove a user''s last factor)' USING ERRCODE = 'P0001';
  END IF;
  DELETE FROM pam_totp.factors WHERE user_name = p_user AND label = p_label;
  IF n - 1 = 0 THEN DELETE FROM pam_totp.users WHERE name = p_user; END IF;
  RETURN n - 1;
END $$;

-- Admin: clears failures and lockout; returns what was cleared (NULL row: no such user).
CREATE FUNCTION pam_totp.unlock(p_user text) RETURNS TABLE (failures integer, locked_until bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
DECLARE u pam_totp.users%ROWTYPE;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'this user has no factor' USING ERRCODE = 'P0001'; END IF;
  UPDATE pam_totp.users SET failures = 0, locked_until = 0 WHERE name = p_user;
  RETURN QUERY SELECT u.failures, u.locked_until;
END $$;

-- Admin: removes everything held for the user; false if there was nothing.
CREATE FUNCTION pam_totp.purge(p_user text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
BEGIN
  DELETE FROM pam_totp.users WHERE name = p_user;
  RETURN FOUND;
END $$;

-- Admin: everyone's status (no secret).
CREATE FUNCTION pam_totp.all_status()
RETURNS TABLE (name text, uid bigint, factors bigint, failures integer, locked_until bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT u.name, u.uid, (SELECT count(*) FROM pam_totp.factors f WHERE f.user_name = u.name), u.failures, u.locked_until
    FROM pam_totp.users u ORDER BY u.name
$$;

-- import-files: a user's failure count, lockout and used recovery codes, and a factor's last
-- used step, as the file store had them. They only ever make things stricter (greatest, or),
-- which a host could do anyway with wrong answers: granted to hosts.
CREATE FUNCTION pam_totp.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  UPDATE pam_totp.users SET failures = greatest(failures, p_failures), locked_until = greatest(locked_until, p_locked_until)
   WHERE name = p_user;
  UPDATE pam_totp.recovery SET used = used | p_recovery_used WHERE user_name = p_user;
$$;

CREATE FUNCTION pam_totp.import_last_step(p_user text, p_label text, p_last_step bigint) RETURNS void
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  UPDATE pam_totp.factors SET last_step = greatest(last_step, p_last_step) WHERE user_name = p_user AND label = p_label;
$$;

-- Functions are executable by PUBLIC by default: none of these is.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pam_totp FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pam_totp_crypto FROM PUBLIC;
GRANT USAGE ON SCHEMA pam_totp TO pam_totp_host, pam_totp_admin;
GRANT EXECUTE ON FUNCTION
  pam_totp.verify(text, text, integer, integer, bigint, boolean),
  pam_totp.enrolled_uid(text),
  pam_totp.user_status(text),
  pam_totp.list_factors(text),
  pam_totp.check_enrollable(text, bigint, text, bytea),
  pam_totp.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea),
  pam_totp.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[]),
  pam_totp.remove_factor(text, bigint, text, boolean),
  pam_totp.import_state(text, integer, bigint, bigint),
  pam_totp.import_last_step(text, text, bigint)
TO pam_totp_host, pam_totp_admin;
GRANT EXECUTE ON FUNCTION
  pam_totp.unlock(text),
  pam_totp.purge(text),
  pam_totp.all_status()
TO pam_totp_admin;
