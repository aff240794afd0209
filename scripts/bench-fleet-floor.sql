-- scripts/bench-fleet-floor.sql: the floor under a fleet login, for scripts/bench-fleet.sh only
-- (never part of a real database: created in the bench's throwaway PostgreSQL, as its owner).
--
-- A fleet login must make its attempt durable before it tells the verdict (docs/ARCHITECTURE.md,
-- section 8, rule (b)): two commits, each one WAL flush. These procedures make only the writes a
-- login makes, with none of its checks (no HMAC, no lock-out logic, no collation check, no
-- helper functions), called by psql (a C client) straight into PostgreSQL, without pam-totpd:
-- what no implementation of the rules can go below on this machine.
--   two_commits: one row updated, COMMIT, the same row updated again (the COMMIT after CALL).
--   required_writes: an accepted code's writes, as pam_totp_api.login makes them: the failure
--     counted and the attempt row inserted; COMMIT; the attempt row deleted, the factor's used
--     step written, the failures cleared and the proof recorded, one audit row. The step is
--     written with its own value, so the runs after it find every used step as it was; both
--     procedures leave every user they touch with no failure counted.
CREATE SCHEMA bench_floor;

CREATE PROCEDURE bench_floor.two_commits(p_user text)
LANGUAGE plpgsql
AS $$
BEGIN
  UPDATE pam_totp.users SET failures = failures + 1 WHERE name = p_user;
  COMMIT;
  UPDATE pam_totp.users SET failures = 0 WHERE name = p_user;
END $$;

CREATE PROCEDURE bench_floor.required_writes(p_user text)
LANGUAGE plpgsql
AS $$
DECLARE attempt bigint;
BEGIN
  UPDATE pam_totp.users SET failures = failures + 1 WHERE name = p_user;
  INSERT INTO pam_totp.attempts (role, xact, begun, at, user_name, uid, verdict, factor_id, step, label, digits,
                                 replayed, failures, locked_until)
  VALUES (session_user, pg_current_xact_id(), 0, 0, p_user, 0, 'match', NULL, 0, 'phone', 6, false, 1, 0)
  RETURNING id INTO attempt;
  COMMIT;
  DELETE FROM pam_totp.attempts WHERE id = attempt;
  UPDATE pam_totp.factors SET last_step = last_step WHERE user_name = p_user;
  UPDATE pam_totp.users SET failures = 0, locked_until = 0, proof_role = session_user, proof_until = 0 WHERE name = p_user;
  INSERT INTO pam_totp.audit (at, role, account, uid, event, label, failures, locked_until, detail)
  VALUES (floor(extract(epoch FROM clock_timestamp()))::bigint, session_user, p_user, 0, 'success', 'phone', 0, NULL, NULL);
END $$;
