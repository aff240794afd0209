-- pam_totp fleet schema, version 8: a host changes an enrolled user's factors or recovery codes
-- only after that user proved themselves through it.
-- Until now any host role could call enroll, replace_recovery and remove_factor for any user:
-- a compromised host could add a factor (or recovery codes) of its own for every enrolled
-- user and then log in as them on every host, without ever reading a secret. Now, for a user
-- who already has a factor, those need either
--   * a code of that user accepted through the same login role (session_user) within the last
--     10 minutes (login_at records it: pam_totp at login, or totp-enroll's own check of a
--     current code), or
--   * a role with pam_totp_admin.
-- A first factor still needs no proof (nothing to prove with: trust on first use, as with the
-- file store); its enrolment, proved by a code from the new factor, counts as the proof for the
-- rest of that enrolment (recovery codes, a second factor) from the same role.
-- The checked wrappers take the old names and signatures; the old functions are renamed
-- *_unchecked and executable by nobody but their owner.
-- User names are compared byte for byte whatever collation the caller passes: a PL/pgSQL
-- function takes its input collation from its arguments, so `'alice' COLLATE pg_temp.ci` (a
-- nondeterministic collation a host may create: TEMP on the database is PUBLIC's by default)
-- would make every `name = p_user` below case-insensitive and lend ALICE's proof to alice. The
-- entry points that check or record a proof refuse such a call first (require_exact_names).
-- A rename keeps a function's grants: the *_unchecked bodies lose every grant but their
-- owner's, also one a DBA made directly on the old names.

ALTER TABLE pam_totp.users ADD COLUMN proof_role name, ADD COLUMN proof_until bigint NOT NULL DEFAULT 0;

-- Raises unless p's collation (the calling function's input collation) compares byte for byte.
CREATE FUNCTION pam_totp.require_exact_names(p text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
AS $$
BEGIN
  IF NOT coalesce((SELECT c.collisdeterministic FROM pg_catalog.pg_collation c
                    WHERE c.oid = pg_catalog.pg_collation_for(p)::pg_catalog.regcollation), false) THEN
    RAISE EXCEPTION 'pam_totp compares user names byte for byte: call without a nondeterministic COLLATE' USING ERRCODE = 'P0001';
  END IF;
END $$;

-- Raises unless the session may change p_user's enrolment now. The caller holds the user's row lock.
CREATE FUNCTION pam_totp.require_proof(p_user text, p_now bigint) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
AS $$
BEGIN
  IF pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM pam_totp.users u
                  WHERE u.name = p_user AND u.proof_role = session_user AND u.proof_until >= p_now) THEN
    RAISE EXCEPTION 'changing the factors or recovery codes of a user who has a factor needs a current code of that user through this host first (within 10 minutes), or a role with pam_totp_admin' USING ERRCODE = 'P0001';
  END IF;
END $$;

ALTER FUNCTION pam_totp.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea) RENAME TO enroll_unchecked;
ALTER FUNCTION pam_totp.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[]) RENAME TO replace_recovery_unchecked;
ALTER FUNCTION pam_totp.remove_factor(text, bigint, text, boolean) RENAME TO remove_factor_unchecked;
DO $$
DECLARE
  f regprocedure;
  g record;
BEGIN
  FOREACH f IN ARRAY ARRAY['pam_totp.enroll_unchecked(text,bigint,text,text,integer,integer,bigint,bigint,bytea)'::regprocedure,
                           'pam_totp.replace_recovery_unchecked(text,bigint,bigint,integer,bytea,bytea[],text[])'::regprocedure,
                           'pam_totp.remove_factor_unchecked(text,bigint,text,boolean)'::regprocedure] LOOP
    FOR g IN SELECT DISTINCT a.grantee FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid = f AND a.grantee <> p.proowner LOOP
      EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', f,
                                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END);
    END LOOP;
  END LOOP;
END $$;

CREATE FUNCTION pam_totp.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer,
                                p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
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

CREATE FUNCTION pam_totp.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer,
                                          p_salt bytea, p_hashes bytea[], p_codes text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
AS $$
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    PERFORM pam_totp.require_proof(p_user, floor(extract(epoch FROM clock_timestamp()))::bigint);
  END IF;
  RETURN pam_totp.replace_recovery_unchecked(p_user, p_uid, p_set_id, p_iterations, p_salt, p_hashes, p_codes);
END $$;

CREATE FUNCTION pam_totp.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
AS $$
BEGIN
  PERFORM pam_totp.require_exact_names(p_user);
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    PERFORM pam_totp.require_proof(p_user, floor(extract(epoch FROM clock_timestamp()))::bigint);
  END IF;
  RETURN pam_totp.remove_factor_unchecked(p_user, p_uid, p_label, p_may_remove_last);
END $$;

CREATE OR REPLACE FUNCTION pam_totp.login_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer,
                                  p_max_failures integer, p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pg_temp
SET standard_conforming_strings = on
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

-- 006 re-created verify_at without 005's standard_conforming_strings = on.
ALTER FUNCTION pam_totp.verify_at(text,text,bigint,integer,integer,bigint,boolean) SET standard_conforming_strings = on;

REVOKE ALL ON FUNCTION pam_totp.require_proof(text, bigint), pam_totp.require_exact_names(text),
                       pam_totp.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea),
                       pam_totp.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[]),
                       pam_totp.remove_factor(text, bigint, text, boolean)
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pam_totp.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea),
                          pam_totp.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[]),
                          pam_totp.remove_factor(text, bigint, text, boolean)
  TO pam_totp_host, pam_totp_admin;
