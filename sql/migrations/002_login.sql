-- pam_totp fleet schema, version 2: a login is one statement (docs/ARCHITECTURE.md, section 8).
-- `login` checks that the user is enrolled for the account's uid and gives verify's verdict,
-- in one call: the daemon no longer asks enrolled_uid first.

CREATE FUNCTION pam_totp.login_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer,
                                  p_max_failures integer, p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
DECLARE
  win integer;
  decoy integer;
BEGIN
  -- Not enrolled, or enrolled for another account (a reused name): not this account's. The
  -- same HMACs as one SHA-1 factor's window are computed first, so the answer takes about as
  -- long as an enrolled user's (docs/ARCHITECTURE.md, section 4.2).
  IF p_uid IS NULL OR NOT EXISTS (SELECT 1 FROM pam_totp.users u WHERE u.name = p_user AND u.uid = p_uid
                                    AND EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = u.name)) THEN
    SELECT least(greatest(coalesce(p_window, 0), 0), s.max_window) INTO win FROM pam_totp.settings s;
    SELECT sum(pam_totp.hotp('\x0000000000000000000000000000000000000000'::bytea, i, 'sha1', 6)) INTO decoy
      FROM generate_series(0, 2 * win) i;
    RETURN QUERY SELECT 'unenrolled'::text, NULL::text, NULL::bigint, NULL::integer, 0, 0::bigint, false, NULL::integer;
    RETURN;
  END IF;
  RETURN QUERY SELECT * FROM pam_totp.verify_at(p_user, p_answer, p_now, p_window, p_max_failures, p_lockout, p_forward_pass);
END $$;

-- What a host calls: on the database's clock.
CREATE FUNCTION pam_totp.login(p_user text, p_uid bigint, p_answer text, p_window integer, p_max_failures integer,
                               p_lockout bigint, p_forward_pass boolean)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pam_totp
AS $$
  SELECT * FROM pam_totp.login_at(p_user, p_uid, p_answer, floor(extract(epoch FROM clock_timestamp()))::bigint,
                                  p_window, p_max_failures, p_lockout, p_forward_pass)
$$;

REVOKE ALL ON FUNCTION pam_totp.login_at(text, bigint, text, bigint, integer, integer, bigint, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION pam_totp.login(text, bigint, text, integer, integer, bigint, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pam_totp.login(text, bigint, text, integer, integer, bigint, boolean) TO pam_totp_host, pam_totp_admin;
