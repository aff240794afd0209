-- pam_totp fleet schema, version 2: every limit in the settings row, and attempts that are
-- durable before their verdict is told (docs/ARCHITECTURE.md, section 8).
--
-- A login used to return its verdict inside the caller's transaction: a host role wrapped
-- each call in a savepoint (or BEGIN ... ROLLBACK) and undid every wrong guess, uncounted.
-- Now a login is two steps (sql/api.sql: login_begin, login_finish, and the procedure login
-- that commits between them): the attempt is recorded, and counted as a failure, in a
-- transaction that must have committed before login_finish tells its verdict. The verdict
-- waits in pam_totp.attempts, which no login role can read.

-- The limits the functions read: the hard failure cap (written by init-database from the one
-- Swift constant, UserState.hardFailureCap), the longest lockout, how long a proof lasts and
-- how long an attempt waits for its finish.
ALTER TABLE pam_totp.settings
  ADD COLUMN hard_failure_cap integer NOT NULL DEFAULT 100 CHECK (hard_failure_cap >= 1),
  ADD COLUMN max_lockout bigint NOT NULL DEFAULT 86400 CHECK (max_lockout >= 0),
  ADD COLUMN proof_seconds bigint NOT NULL DEFAULT 600 CHECK (proof_seconds BETWEEN 0 AND 86400),
  ADD COLUMN attempt_seconds bigint NOT NULL DEFAULT 60 CHECK (attempt_seconds BETWEEN 1 AND 3600);
ALTER TABLE pam_totp.settings DROP CONSTRAINT settings_max_failures_check,
  ADD CONSTRAINT settings_max_failures_check CHECK (max_failures BETWEEN 1 AND hard_failure_cap);
ALTER TABLE pam_totp.settings DROP CONSTRAINT settings_min_lockout_check,
  ADD CONSTRAINT settings_min_lockout_check CHECK (min_lockout BETWEEN 0 AND max_lockout);

-- An attempt between login_begin and login_finish. `xact` is the transaction that recorded it:
-- login_finish tells nothing until that transaction has committed. An attempt never finished
-- stays counted as the failure login_begin recorded.
CREATE TABLE pam_totp.attempts (
  id bigserial PRIMARY KEY,
  role name NOT NULL,                       -- the session_user that began it: only it finishes it
  xact xid8 NOT NULL,
  begun bigint NOT NULL,                    -- the database's clock at login_begin
  at bigint NOT NULL,                       -- the time the code was checked for
  user_name text NOT NULL,
  uid bigint,
  verdict text NOT NULL CHECK (verdict IN ('match', 'recovery', 'wrong', 'locked', 'unenrolled')),
  factor_id bigint,                         -- match: the factor and step to mark used
  step bigint,
  label text,
  digits integer,
  recovery_set bigint,                      -- recovery: the set and the code to mark used
  recovery_index integer,
  replayed boolean NOT NULL DEFAULT false,
  failures integer NOT NULL DEFAULT 0,      -- as login_begin left them
  locked_until bigint NOT NULL DEFAULT 0
);
CREATE INDEX attempts_begun ON pam_totp.attempts (begun);
REVOKE ALL ON pam_totp.attempts FROM PUBLIC;
REVOKE ALL ON SEQUENCE pam_totp.attempts_id_seq FROM PUBLIC;

-- The functions moved to their own schema (sql/api.sql): the data schema is no login role's.
REVOKE ALL ON SCHEMA pam_totp FROM pam_totp_host, pam_totp_admin;
