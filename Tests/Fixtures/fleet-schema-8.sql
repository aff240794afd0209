--
-- PostgreSQL database dump
--

\restrict xDYEFLq8o3ZazpysJBVWTPrxQmpApwHK97VrN7OCpZbVBgcwNU1P2jAfTSmb68n

-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: pam_totp; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pam_totp;


--
-- Name: pam_totp_crypto; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pam_totp_crypto;


--
-- Name: pgcrypto; Type: EXTENSION; Schema: -; Owner: -
--

CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA pam_totp_crypto;


--
-- Name: EXTENSION pgcrypto; Type: COMMENT; Schema: -; Owner: -
--

COMMENT ON EXTENSION pgcrypto IS 'cryptographic functions';


--
-- Name: all_status(); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.all_status() RETURNS TABLE(name text, uid bigint, factors bigint, failures integer, locked_until bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT u.name, u.uid, (SELECT count(*) FROM pam_totp.factors f WHERE f.user_name = u.name), u.failures, u.locked_until
    FROM pam_totp.users u ORDER BY u.name
$$;


--
-- Name: check_enrollable(text, bigint, text, bytea); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) RETURNS void
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
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


--
-- Name: enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
DECLARE
  now_ bigint := floor(extract(epoch FROM clock_timestamp()))::bigint;
  had boolean;
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  had := EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user);
  IF had THEN PERFORM pam_totp.require_proof(p_user, now_); END IF;
  PERFORM pam_totp.enroll_unchecked(p_user, p_uid, p_label, p_algorithm, p_digits, p_period, p_created, p_enrolled_step, p_secret);
  IF NOT had THEN
    UPDATE pam_totp.users SET proof_role = session_user, proof_until = now_ + 600 WHERE name = p_user;
  END IF;
END $$;


--
-- Name: enroll_unchecked(text, bigint, text, text, integer, integer, bigint, bigint, bytea); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.enroll_unchecked(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  PERFORM pam_totp.check_enrollable(p_user, p_uid, p_label, p_secret);
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret)
  VALUES (p_user, p_label, p_algorithm, p_digits, p_period, p_created, p_enrolled_step, p_secret);
END $$;


--
-- Name: enrolled_uid(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.enrolled_uid(p_user text) RETURNS bigint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT u.uid FROM pam_totp.users u WHERE u.name = p_user AND EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = u.name)
$$;


--
-- Name: hotp(bytea, bigint, text, integer); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.hotp(secret bytea, counter bigint, algorithm text, digits integer) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pam_totp_crypto', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT ((((get_byte(mac, o) & 127)::bigint << 24) | (get_byte(mac, o + 1) << 16)
          | (get_byte(mac, o + 2) << 8) | get_byte(mac, o + 3)) % (CASE digits WHEN 8 THEN 100000000 ELSE 1000000 END))::integer
  FROM (SELECT pam_totp_crypto.hmac(int8send(counter), secret, algorithm) AS mac) h,
       LATERAL (SELECT get_byte(h.mac, octet_length(h.mac) - 1) & 15 AS o) t
$$;


--
-- Name: import_last_step(text, text, bigint); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.import_last_step(p_user text, p_label text, p_last_step bigint) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  UPDATE pam_totp.factors SET last_step = greatest(last_step, p_last_step) WHERE user_name = p_user AND label = p_label;
$$;


--
-- Name: import_state(text, integer, bigint, bigint); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  UPDATE pam_totp.users SET failures = greatest(failures, p_failures), locked_until = greatest(locked_until, p_locked_until)
   WHERE name = p_user;
  UPDATE pam_totp.recovery SET used = used | p_recovery_used WHERE user_name = p_user;
$$;


--
-- Name: list_factors(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.list_factors(p_user text) RETURNS TABLE(label text, algorithm text, digits integer, period integer, created bigint, last_step bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT f.label, f.algorithm, f.digits, f.period, f.created, f.last_step FROM pam_totp.factors f
   WHERE f.user_name = p_user ORDER BY f.id
$$;


--
-- Name: login(text, bigint, text, integer, integer, bigint, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) RETURNS TABLE(outcome text, label text, step bigint, digits integer, failures integer, locked_until bigint, replayed boolean, remaining integer)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT * FROM pam_totp.login_at(p_user, p_uid, p_answer, floor(extract(epoch FROM clock_timestamp()))::bigint,
                                  p_window, p_max_failures, p_lockout, p_forward_pass)
$$;


--
-- Name: login_at(text, bigint, text, bigint, integer, integer, bigint, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.login_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) RETURNS TABLE(outcome text, label text, step bigint, digits integer, failures integer, locked_until bigint, replayed boolean, remaining integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
DECLARE
  win integer;
  decoy integer;
  v record;
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  -- Not enrolled, or enrolled for another account: as in version 2 (the same HMACs first).
  IF p_uid IS NULL OR NOT EXISTS (SELECT 1 FROM pam_totp.users u WHERE u.name = p_user AND u.uid = p_uid
                                    AND EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = u.name)) THEN
    SELECT least(greatest(coalesce(p_window, 0), 0), s.max_window) INTO win FROM pam_totp.settings s;
    SELECT sum(pam_totp.hotp('\x0000000000000000000000000000000000000000'::bytea, i, 'sha1', 6)) INTO decoy
      FROM generate_series(0, 2 * win) i;
    RETURN QUERY SELECT 'unenrolled'::text, NULL::text, NULL::bigint, NULL::integer, 0, 0::bigint, false, NULL::integer;
    RETURN;
  END IF;
  FOR v IN SELECT * FROM pam_totp.verify_at(p_user, p_answer, p_now, p_window, p_max_failures, p_lockout, p_forward_pass) LOOP
    IF v.outcome IN ('success', 'recovery') THEN
      UPDATE pam_totp.users SET proof_role = session_user, proof_until = p_now + 600 WHERE name = p_user;
    END IF;
    outcome := v.outcome; label := v.label; step := v.step; digits := v.digits; failures := v.failures;
    locked_until := v.locked_until; replayed := v.replayed; remaining := v.remaining;
    RETURN NEXT;
  END LOOP;
END $$;


--
-- Name: pbkdf2_sha256(bytea, bytea, integer); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.pbkdf2_sha256(password bytea, salt bytea, iterations integer) RETURNS bytea
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pam_totp_crypto', 'pg_temp'
    SET standard_conforming_strings TO 'on'
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


--
-- Name: purge(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.purge(p_user text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  DELETE FROM pam_totp.users WHERE name = p_user;
  RETURN FOUND;
END $$;


--
-- Name: remove_factor(text, bigint, text, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    PERFORM pam_totp.require_proof(p_user, floor(extract(epoch FROM clock_timestamp()))::bigint);
  END IF;
  RETURN pam_totp.remove_factor_unchecked(p_user, p_uid, p_label, p_may_remove_last);
END $$;


--
-- Name: remove_factor_unchecked(text, bigint, text, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.remove_factor_unchecked(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
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


--
-- Name: replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[]); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    PERFORM pam_totp.require_proof(p_user, floor(extract(epoch FROM clock_timestamp()))::bigint);
  END IF;
  RETURN pam_totp.replace_recovery_unchecked(p_user, p_uid, p_set_id, p_iterations, p_salt, p_hashes, p_codes);
END $$;


--
-- Name: replace_recovery_unchecked(text, bigint, bigint, integer, bytea, bytea[], text[]); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.replace_recovery_unchecked(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pam_totp_crypto', 'pg_temp'
    SET standard_conforming_strings TO 'on'
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


--
-- Name: require_exact_names(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.require_exact_names(p text) RETURNS void
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  IF NOT coalesce((SELECT c.collisdeterministic FROM pg_catalog.pg_collation c
                    WHERE c.oid = pg_catalog.pg_collation_for(p)::pg_catalog.regcollation), false) THEN
    RAISE EXCEPTION 'pam_totp compares user names byte for byte: call without a nondeterministic COLLATE' USING ERRCODE = 'P0001';
  END IF;
END $$;


--
-- Name: require_proof(text, bigint); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.require_proof(p_user text, p_now bigint) RETURNS void
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
BEGIN
  IF pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM pam_totp.users u
                  WHERE u.name = p_user AND u.proof_role = session_user AND u.proof_until >= p_now) THEN
    RAISE EXCEPTION 'changing the factors or recovery codes of a user who has a factor needs a current code of that user through this host first (within 10 minutes), or a role with pam_totp_admin' USING ERRCODE = 'P0001';
  END IF;
END $$;


--
-- Name: unlock(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.unlock(p_user text) RETURNS TABLE(failures integer, locked_until bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
DECLARE u pam_totp.users%ROWTYPE;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'this user has no factor' USING ERRCODE = 'P0001'; END IF;
  UPDATE pam_totp.users SET failures = 0, locked_until = 0 WHERE name = p_user;
  RETURN QUERY SELECT u.failures, u.locked_until;
END $$;


--
-- Name: user_status(text); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.user_status(p_user text) RETURNS TABLE(uid bigint, failures integer, locked_until bigint, recovery_set bigint, recovery_codes integer, recovery_used bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT u.uid, u.failures, u.locked_until, r.set_id, cardinality(r.hashes), r.used
    FROM pam_totp.users u LEFT JOIN pam_totp.recovery r ON r.user_name = u.name WHERE u.name = p_user
$$;


--
-- Name: verify(text, text, integer, integer, bigint, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.verify(p_user text, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) RETURNS TABLE(outcome text, label text, step bigint, digits integer, failures integer, locked_until bigint, replayed boolean, remaining integer)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $$
  SELECT * FROM pam_totp.verify_at(p_user, p_answer, floor(extract(epoch FROM clock_timestamp()))::bigint,
                                   p_window, p_max_failures, p_lockout, p_forward_pass)
$$;


--
-- Name: verify_at(text, text, bigint, integer, integer, bigint, boolean); Type: FUNCTION; Schema: pam_totp; Owner: -
--

CREATE FUNCTION pam_totp.verify_at(p_user text, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) RETURNS TABLE(outcome text, label text, step bigint, digits integer, failures integer, locked_until bigint, replayed boolean, remaining integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pam_totp', 'pam_totp_crypto', 'pg_temp'
    SET standard_conforming_strings TO 'on'
    AS $_$
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

  -- A recovery-code-shaped answer: one PBKDF2, then every stored hash; also when a factor
  -- matched (used only if none did), so a right code costs what a wrong one does.
  IF NOT p_forward_pass AND p_answer ~ '^[0-9 -]+$' THEN
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
  -- Every maxf-th failure (the caller's, if stricter) and every database max_failures-th,
  -- whatever the caller asked for on earlier calls.
  IF lock_for > 0 AND (fails % maxf = 0 OR fails % cfg.max_failures = 0) THEN until_ := p_now + lock_for; END IF;
  UPDATE pam_totp.users SET failures = fails, locked_until = CASE WHEN until_ > 0 THEN until_ ELSE pam_totp.users.locked_until END
   WHERE name = p_user;
  RETURN QUERY SELECT 'wrong'::text, NULL::text, NULL::bigint, NULL::integer, fails, until_, rep, NULL::integer;
END $_$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: factors; Type: TABLE; Schema: pam_totp; Owner: -
--

CREATE TABLE pam_totp.factors (
    id bigint NOT NULL,
    user_name text NOT NULL,
    label text NOT NULL,
    algorithm text NOT NULL,
    digits integer NOT NULL,
    period integer NOT NULL,
    created bigint NOT NULL,
    last_step bigint NOT NULL,
    secret bytea NOT NULL,
    CONSTRAINT factors_algorithm_check CHECK ((algorithm = ANY (ARRAY['sha1'::text, 'sha256'::text, 'sha512'::text]))),
    CONSTRAINT factors_digits_check CHECK ((digits = ANY (ARRAY[6, 8]))),
    CONSTRAINT factors_label_check CHECK (((octet_length(label) >= 1) AND (octet_length(label) <= 64))),
    CONSTRAINT factors_last_step_check CHECK ((last_step >= 0)),
    CONSTRAINT factors_period_check CHECK (((period >= 1) AND (period <= 3600))),
    CONSTRAINT factors_secret_check CHECK (((octet_length(secret) >= 10) AND (octet_length(secret) <= 128)))
);


--
-- Name: factors_id_seq; Type: SEQUENCE; Schema: pam_totp; Owner: -
--

CREATE SEQUENCE pam_totp.factors_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: factors_id_seq; Type: SEQUENCE OWNED BY; Schema: pam_totp; Owner: -
--

ALTER SEQUENCE pam_totp.factors_id_seq OWNED BY pam_totp.factors.id;


--
-- Name: recovery; Type: TABLE; Schema: pam_totp; Owner: -
--

CREATE TABLE pam_totp.recovery (
    user_name text NOT NULL,
    set_id bigint NOT NULL,
    iterations integer NOT NULL,
    salt bytea NOT NULL,
    hashes bytea[] NOT NULL,
    used bigint DEFAULT 0 NOT NULL,
    CONSTRAINT recovery_hashes_check CHECK (((cardinality(hashes) >= 1) AND (cardinality(hashes) <= 32))),
    CONSTRAINT recovery_iterations_check CHECK (((iterations >= 1000) AND (iterations <= 100000))),
    CONSTRAINT recovery_salt_check CHECK (((octet_length(salt) >= 8) AND (octet_length(salt) <= 64)))
);


--
-- Name: schema_version; Type: TABLE; Schema: pam_totp; Owner: -
--

CREATE TABLE pam_totp.schema_version (
    version integer NOT NULL,
    name text NOT NULL,
    applied timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: settings; Type: TABLE; Schema: pam_totp; Owner: -
--

CREATE TABLE pam_totp.settings (
    only_row boolean DEFAULT true NOT NULL,
    max_window integer DEFAULT 1 NOT NULL,
    max_failures integer DEFAULT 10 NOT NULL,
    min_lockout bigint DEFAULT 300 NOT NULL,
    CONSTRAINT settings_max_failures_check CHECK (((max_failures >= 1) AND (max_failures <= 100))),
    CONSTRAINT settings_max_window_check CHECK (((max_window >= 0) AND (max_window <= 10))),
    CONSTRAINT settings_min_lockout_check CHECK (((min_lockout >= 0) AND (min_lockout <= 86400))),
    CONSTRAINT settings_only_row_check CHECK (only_row)
);


--
-- Name: users; Type: TABLE; Schema: pam_totp; Owner: -
--

CREATE TABLE pam_totp.users (
    name text NOT NULL,
    uid bigint NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    locked_until bigint DEFAULT 0 NOT NULL,
    proof_role name,
    proof_until bigint DEFAULT 0 NOT NULL,
    CONSTRAINT users_failures_check CHECK ((failures >= 0)),
    CONSTRAINT users_name_check CHECK (((name ~ '^[!-~]{1,255}$'::text) AND (name !~ '^[.]'::text) AND (POSITION(('/'::text) IN (name)) = 0))),
    CONSTRAINT users_uid_check CHECK (((uid >= 0) AND (uid <= '4294967295'::bigint)))
);


--
-- Name: factors id; Type: DEFAULT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.factors ALTER COLUMN id SET DEFAULT nextval('pam_totp.factors_id_seq'::regclass);


--
-- Data for Name: factors; Type: TABLE DATA; Schema: pam_totp; Owner: -
--

COPY pam_totp.factors (id, user_name, label, algorithm, digits, period, created, last_step, secret) FROM stdin;
1	alice	phone	sha1	6	30	1700000000	56666666	\\x3132333435363738393031323334353637383930
2	alice	tablet	sha256	8	60	1700000100	28333335	\\x3132333435363738393031323334353637383930313233343536373839303132
3	bob	fob	sha512	6	30	1700000000	0	\\x31323334353637383930313233343536373839303132333435363738393031323334353637383930313233343536373839303132333435363738393031323334
\.


--
-- Data for Name: recovery; Type: TABLE DATA; Schema: pam_totp; Owner: -
--

COPY pam_totp.recovery (user_name, set_id, iterations, salt, hashes, used) FROM stdin;
alice	77	1000	\\x30313233343536373839616263646566	{"\\\\x62cd67b89ddd1cc5307aefb6e804af56178e22da7dc61e5b9794d21eecf0a578","\\\\xa68295058ae33248bc97d52f802d226293be83440e77c6eb35f9f0849a803920"}	1
\.


--
-- Data for Name: schema_version; Type: TABLE DATA; Schema: pam_totp; Owner: -
--

COPY pam_totp.schema_version (version, name, applied) FROM stdin;
1	001_fleet.sql	2026-11-24 02:51:00.734252+00
2	002_login.sql	2026-11-24 02:51:00.734252+00
3	003_pg_temp_last.sql	2026-11-24 02:51:00.734252+00
4	004_lockout_ceiling.sql	2026-11-24 02:51:00.734252+00
5	005_standard_strings.sql	2026-11-24 02:51:00.734252+00
6	006_constant_work.sql	2026-11-24 02:51:00.734252+00
7	007_hosts_login_only.sql	2026-11-24 02:51:00.734252+00
8	008_changes_need_proof.sql	2026-11-24 02:51:00.734252+00
\.


--
-- Data for Name: settings; Type: TABLE DATA; Schema: pam_totp; Owner: -
--

COPY pam_totp.settings (only_row, max_window, max_failures, min_lockout) FROM stdin;
t	1	10	300
\.


--
-- Data for Name: users; Type: TABLE DATA; Schema: pam_totp; Owner: -
--

COPY pam_totp.users (name, uid, failures, locked_until, proof_role, proof_until) FROM stdin;
alice	1001	3	0	postgres	1700000800
bob	1002	100	0	postgres	1795489260
\.


--
-- Name: factors_id_seq; Type: SEQUENCE SET; Schema: pam_totp; Owner: -
--

SELECT pg_catalog.setval('pam_totp.factors_id_seq', 3, true);


--
-- Name: factors factors_pkey; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.factors
    ADD CONSTRAINT factors_pkey PRIMARY KEY (id);


--
-- Name: factors factors_user_name_label_key; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.factors
    ADD CONSTRAINT factors_user_name_label_key UNIQUE (user_name, label);


--
-- Name: recovery recovery_pkey; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.recovery
    ADD CONSTRAINT recovery_pkey PRIMARY KEY (user_name);


--
-- Name: schema_version schema_version_pkey; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.schema_version
    ADD CONSTRAINT schema_version_pkey PRIMARY KEY (version);


--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (only_row);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (name);


--
-- Name: factors factors_user_name_fkey; Type: FK CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.factors
    ADD CONSTRAINT factors_user_name_fkey FOREIGN KEY (user_name) REFERENCES pam_totp.users(name) ON DELETE CASCADE;


--
-- Name: recovery recovery_user_name_fkey; Type: FK CONSTRAINT; Schema: pam_totp; Owner: -
--

ALTER TABLE ONLY pam_totp.recovery
    ADD CONSTRAINT recovery_user_name_fkey FOREIGN KEY (user_name) REFERENCES pam_totp.users(name) ON DELETE CASCADE;


--
-- Name: SCHEMA pam_totp; Type: ACL; Schema: -; Owner: -
--

GRANT USAGE ON SCHEMA pam_totp TO pam_totp_host;
GRANT USAGE ON SCHEMA pam_totp TO pam_totp_admin;


--
-- Name: FUNCTION all_status(); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.all_status() FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.all_status() TO pam_totp_admin;


--
-- Name: FUNCTION check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) TO pam_totp_admin;


--
-- Name: FUNCTION enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) TO pam_totp_admin;


--
-- Name: FUNCTION enroll_unchecked(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.enroll_unchecked(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer, p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) FROM PUBLIC;


--
-- Name: FUNCTION enrolled_uid(p_user text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.enrolled_uid(p_user text) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.enrolled_uid(p_user text) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.enrolled_uid(p_user text) TO pam_totp_admin;


--
-- Name: FUNCTION hotp(secret bytea, counter bigint, algorithm text, digits integer); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.hotp(secret bytea, counter bigint, algorithm text, digits integer) FROM PUBLIC;


--
-- Name: FUNCTION import_last_step(p_user text, p_label text, p_last_step bigint); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.import_last_step(p_user text, p_label text, p_last_step bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.import_last_step(p_user text, p_label text, p_last_step bigint) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.import_last_step(p_user text, p_label text, p_last_step bigint) TO pam_totp_admin;


--
-- Name: FUNCTION import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) TO pam_totp_admin;


--
-- Name: FUNCTION list_factors(p_user text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.list_factors(p_user text) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.list_factors(p_user text) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.list_factors(p_user text) TO pam_totp_admin;


--
-- Name: FUNCTION login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) TO pam_totp_admin;


--
-- Name: FUNCTION login_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.login_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) FROM PUBLIC;


--
-- Name: FUNCTION pbkdf2_sha256(password bytea, salt bytea, iterations integer); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.pbkdf2_sha256(password bytea, salt bytea, iterations integer) FROM PUBLIC;


--
-- Name: FUNCTION purge(p_user text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.purge(p_user text) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.purge(p_user text) TO pam_totp_admin;


--
-- Name: FUNCTION remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) TO pam_totp_admin;


--
-- Name: FUNCTION remove_factor_unchecked(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.remove_factor_unchecked(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) FROM PUBLIC;


--
-- Name: FUNCTION replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) TO pam_totp_admin;


--
-- Name: FUNCTION replace_recovery_unchecked(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.replace_recovery_unchecked(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer, p_salt bytea, p_hashes bytea[], p_codes text[]) FROM PUBLIC;


--
-- Name: FUNCTION require_exact_names(p text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.require_exact_names(p text) FROM PUBLIC;


--
-- Name: FUNCTION require_proof(p_user text, p_now bigint); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.require_proof(p_user text, p_now bigint) FROM PUBLIC;


--
-- Name: FUNCTION unlock(p_user text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.unlock(p_user text) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.unlock(p_user text) TO pam_totp_admin;


--
-- Name: FUNCTION user_status(p_user text); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.user_status(p_user text) FROM PUBLIC;
GRANT ALL ON FUNCTION pam_totp.user_status(p_user text) TO pam_totp_host;
GRANT ALL ON FUNCTION pam_totp.user_status(p_user text) TO pam_totp_admin;


--
-- Name: FUNCTION verify(p_user text, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.verify(p_user text, p_answer text, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) FROM PUBLIC;


--
-- Name: FUNCTION verify_at(p_user text, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean); Type: ACL; Schema: pam_totp; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp.verify_at(p_user text, p_answer text, p_now bigint, p_window integer, p_max_failures integer, p_lockout bigint, p_forward_pass boolean) FROM PUBLIC;


--
-- Name: FUNCTION armor(bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.armor(bytea) FROM PUBLIC;


--
-- Name: FUNCTION armor(bytea, text[], text[]); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.armor(bytea, text[], text[]) FROM PUBLIC;


--
-- Name: FUNCTION crypt(text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.crypt(text, text) FROM PUBLIC;


--
-- Name: FUNCTION dearmor(text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.dearmor(text) FROM PUBLIC;


--
-- Name: FUNCTION decrypt(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.decrypt(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION decrypt_iv(bytea, bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.decrypt_iv(bytea, bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION digest(bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.digest(bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION digest(text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.digest(text, text) FROM PUBLIC;


--
-- Name: FUNCTION encrypt(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.encrypt(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION encrypt_iv(bytea, bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.encrypt_iv(bytea, bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION gen_random_bytes(integer); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.gen_random_bytes(integer) FROM PUBLIC;


--
-- Name: FUNCTION gen_random_uuid(); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.gen_random_uuid() FROM PUBLIC;


--
-- Name: FUNCTION gen_salt(text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.gen_salt(text) FROM PUBLIC;


--
-- Name: FUNCTION gen_salt(text, integer); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.gen_salt(text, integer) FROM PUBLIC;


--
-- Name: FUNCTION hmac(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.hmac(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION hmac(text, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.hmac(text, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_armor_headers(text, OUT key text, OUT value text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_armor_headers(text, OUT key text, OUT value text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_key_id(bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_key_id(bytea) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt(bytea, bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt(bytea, bytea) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt(bytea, bytea, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt(bytea, bytea, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt_bytea(bytea, bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt_bytea(bytea, bytea) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt_bytea(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt_bytea(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_decrypt_bytea(bytea, bytea, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_decrypt_bytea(bytea, bytea, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_encrypt(text, bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_encrypt(text, bytea) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_encrypt(text, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_encrypt(text, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_encrypt_bytea(bytea, bytea); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_encrypt_bytea(bytea, bytea) FROM PUBLIC;


--
-- Name: FUNCTION pgp_pub_encrypt_bytea(bytea, bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_pub_encrypt_bytea(bytea, bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_decrypt(bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_decrypt(bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_decrypt(bytea, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_decrypt(bytea, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_decrypt_bytea(bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_decrypt_bytea(bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_decrypt_bytea(bytea, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_decrypt_bytea(bytea, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_encrypt(text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_encrypt(text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_encrypt(text, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_encrypt(text, text, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_encrypt_bytea(bytea, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_encrypt_bytea(bytea, text) FROM PUBLIC;


--
-- Name: FUNCTION pgp_sym_encrypt_bytea(bytea, text, text); Type: ACL; Schema: pam_totp_crypto; Owner: -
--

REVOKE ALL ON FUNCTION pam_totp_crypto.pgp_sym_encrypt_bytea(bytea, text, text) FROM PUBLIC;


--
-- PostgreSQL database dump complete
--

\unrestrict xDYEFLq8o3ZazpysJBVWTPrxQmpApwHK97VrN7OCpZbVBgcwNU1P2jAfTSmb68n

