-- pam_totp fleet schema, version 4: the database's max_failures always locks.
-- verify_at locked out at every maxf-th failure, maxf being what the caller asked for on
-- this call (clamped to at most settings.max_failures). A host choosing, per attempt, a value
-- that does not divide the next failure count (one in 2..10 always exists below 2520) was
-- never locked out and reached the 100-failure cap in seconds. Now every
-- settings.max_failures-th failure locks too; a caller can only add lockouts.
-- The same function as in 001 otherwise (and pg_temp last, as 003 made it).

CREATE OR REPLACE FUNCTION pam_totp.verify_at(p_user text, p_answer text, p_now bigint, p_window integer,
                                   p_max_failures integer, p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp, pam_totp_crypto, pg_temp
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
  -- Every maxf-th failure (the caller's, if stricter) and every database max_failures-th,
  -- whatever the caller asked for on earlier calls.
  IF lock_for > 0 AND (fails % maxf = 0 OR fails % cfg.max_failures = 0) THEN until_ := p_now + lock_for; END IF;
  UPDATE pam_totp.users SET failures = fails, locked_until = CASE WHEN until_ > 0 THEN until_ ELSE pam_totp.users.locked_until END
   WHERE name = p_user;
  RETURN QUERY SELECT 'wrong'::text, NULL::text, NULL::bigint, NULL::integer, fails, until_, rep, NULL::integer;
END $$;
