-- pam_totp fleet API: the current body of every function, once (docs/ARCHITECTURE.md, section 8).
-- `pam-totpd init-database` applies the data migrations (sql/migrations/), then drops the
-- schema pam_totp_api and runs this file, in one transaction: what is here is what runs.
--
-- Secrets stay in the database: the tables (schema pam_totp) are readable by no login role;
-- host roles get EXECUTE on the functions granted at the end and nothing else, and no
-- function returns a secret, a recovery-code hash or a salt. Every function a role may call
-- is SECURITY DEFINER (the helpers they call run as its owner too), except the login
-- procedure, which must commit and so runs as its caller (see login). Every function runs
-- with search_path and standard_conforming_strings pinned, set once for all of them at the
-- end of this file (before the grants).
-- Every limit is read from the one settings row.
-- Every refusal has its own SQLSTATE, of the class PT (PT001 ...): the number is the Swift
-- `Refusal` (Sources/MFASystem/Refusal.swift), which pam-totpd maps it to; callers branch on
-- the code, never on the text.

CREATE SCHEMA pam_totp_api;
REVOKE ALL ON SCHEMA pam_totp_api FROM PUBLIC;
GRANT USAGE ON SCHEMA pam_totp_api TO pam_totp_host, pam_totp_admin, pam_totp_sender;

-- HOTP (RFC 4226) value of `counter`: HMAC, dynamic truncation, modulo 10^digits.
CREATE FUNCTION pam_totp_api.hotp(secret bytea, counter bigint, algorithm text, digits integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
-- PL/pgSQL, not SQL: its expressions are planned once a session, where an SQL function that
-- cannot be inlined (this one reads the MAC five times) is planned again at every call, which
-- cost most of a login's HOTP time (a loop calls it for every step of the window).
DECLARE
  mac bytea := pam_totp_crypto.hmac(int8send(counter), secret, algorithm);
  o integer := get_byte(mac, octet_length(mac) - 1) & 15;
BEGIN
  RETURN ((((get_byte(mac, o) & 127)::bigint << 24) | (get_byte(mac, o + 1) << 16)
           | (get_byte(mac, o + 2) << 8) | get_byte(mac, o + 3)) % (CASE digits WHEN 8 THEN 100000000 ELSE 1000000 END))::integer;
END $$;

-- PBKDF2-HMAC-SHA-256 (RFC 8018), one 32-byte block: how recovery codes are stored.
CREATE FUNCTION pam_totp_api.pbkdf2_sha256(password bytea, salt bytea, iterations integer) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
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

-- The database's clock, in whole seconds.
CREATE FUNCTION pam_totp_api.now_seconds() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$ BEGIN RETURN floor(extract(epoch FROM clock_timestamp()))::bigint; END $$;  -- PL/pgSQL: see hotp

-- The hint a host may see of a destination, as MFAPolicy's Destination masks it: a phone's +,
-- first digit, a * for every digit but the last four (+15105551234: +1******1234); an
-- address's first character, ***, @domain (a***@example.com). The table holds only printable
-- ASCII (factors_destination), so the mask is too.
CREATE FUNCTION pam_totp_api.masked(p_kind text, p_destination text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
  SELECT CASE p_kind
    WHEN 'sms' THEN '+' || substr(p_destination, 2, 1) || repeat('*', greatest(length(p_destination) - 6, 0)) || right(p_destination, 4)
    WHEN 'email' THEN left(p_destination, 1) || '***@' || split_part(p_destination, '@', 2)
  END
$$;

-- A code of p_digits decimal digits from pgcrypto's random source, uniform (rejection sampling
-- of 32-bit values).
CREATE FUNCTION pam_totp_api.random_code(p_digits integer) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE m bigint := (10 ^ p_digits)::bigint; lim bigint; v bigint; b bytea;
BEGIN
  lim := 4294967296 - (4294967296 % m);
  LOOP
    b := pam_totp_crypto.gen_random_bytes(4);
    v := (get_byte(b, 0)::bigint << 24) | (get_byte(b, 1)::bigint << 16) | (get_byte(b, 2)::bigint << 8) | get_byte(b, 3)::bigint;
    EXIT WHEN v < lim;
  END LOOP;
  RETURN lpad((v % m)::text, p_digits, '0');
END $$;

-- What a send to a destination is counted under: a SHA-256 of the kind and the destination
-- (an address in lower case: the same mailbox however it is written).
CREATE FUNCTION pam_totp_api.destination_key(p_kind text, p_destination text) RETURNS bytea
LANGUAGE sql IMMUTABLE
AS $$
  SELECT pam_totp_crypto.digest(convert_to(p_kind || ':' || CASE p_kind WHEN 'email' THEN lower(p_destination) ELSE p_destination END,
                                           'UTF8'), 'sha256')
$$;

-- Why p_user may not be sent another code to p_kind p_destination now (NULL: it may), with the
-- same texts as MFAPolicy's OutOfBand.overLimit where they match: the account's resend interval,
-- hour and day; the country prefixes text messages may go to; the destination's hour and day,
-- whatever the account (made-up user names bring no new allowance); the asking host role's
-- minute and hour (one host cannot spend the fleet's budget) and the fleet's minute; all under a
-- lock every send takes, so two sends cannot both take the last slot.
CREATE FUNCTION pam_totp_api.send_refusal(p_user text, p_clock bigint, p_kind text, p_destination text) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE cfg pam_totp.settings%ROWTYPE; last_ bigint; dkey bytea := pam_totp_api.destination_key(p_kind, p_destination);
BEGIN
  -- The settings row, locked first: no login role may lock it (an advisory lock's key is
  -- anyone's to hold), and every send takes it after its user's row, so the order is always the
  -- same. Under it the counts that span accounts (the destination's, the host's, the fleet's)
  -- cannot be raced: two made-up users' sends to one number are counted one after the other.
  PERFORM 1 FROM pam_totp.settings FOR UPDATE;
  SELECT * INTO cfg FROM pam_totp.settings;
  SELECT max(s.at) INTO last_ FROM pam_totp.sends s WHERE s.user_name = p_user;
  IF last_ IS NOT NULL AND p_clock - last_ < cfg.oob_resend_interval THEN
    RETURN 'a code was sent ' || greatest(p_clock - last_, 0) || ' s ago: wait ' || (cfg.oob_resend_interval - greatest(p_clock - last_, 0))
           || ' s before asking for another';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.user_name = p_user AND s.at > p_clock - 3600) >= cfg.oob_max_per_hour THEN
    RETURN 'at most ' || cfg.oob_max_per_hour || ' codes are sent an hour: use your app or a recovery code, or try later';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.user_name = p_user AND s.at > p_clock - 86400) >= cfg.oob_max_per_day THEN
    RETURN 'at most ' || cfg.oob_max_per_day || ' codes are sent a day: use your app or a recovery code, or try tomorrow';
  END IF;
  IF p_kind = 'sms' AND cardinality(cfg.oob_allowed_prefixes) > 0
     AND NOT EXISTS (SELECT 1 FROM unnest(cfg.oob_allowed_prefixes) x WHERE starts_with(p_destination, x)) THEN
    RETURN 'text messages are not sent to that country from here (oob_allowed_prefixes): use your app or a recovery code';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.destination_key = dkey AND s.at > p_clock - 3600) >= cfg.oob_destination_max_per_hour THEN
    RETURN 'at most ' || cfg.oob_destination_max_per_hour || ' codes are sent to one ' || CASE p_kind WHEN 'sms' THEN 'number' ELSE 'address' END
           || ' an hour: use your app or a recovery code, or try later';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.destination_key = dkey AND s.at > p_clock - 86400) >= cfg.oob_destination_max_per_day THEN
    RETURN 'at most ' || cfg.oob_destination_max_per_day || ' codes are sent to one ' || CASE p_kind WHEN 'sms' THEN 'number' ELSE 'address' END
           || ' a day: use your app or a recovery code, or try tomorrow';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.host = pam_totp_api.me() AND s.at > p_clock - 60) >= cfg.oob_host_max_per_minute
     OR (SELECT count(*) FROM pam_totp.sends s WHERE s.host = pam_totp_api.me() AND s.at > p_clock - 3600) >= cfg.oob_host_max_per_hour THEN
    RETURN 'too many codes are being sent from this host: try again later';
  END IF;
  IF (SELECT count(*) FROM pam_totp.sends s WHERE s.at > p_clock - 60) >= cfg.oob_max_per_minute THEN
    RETURN 'too many codes are being sent: try again in a minute';
  END IF;
  RETURN NULL;
END $$;

-- Queues a message with a new code (the outbox, for pam_totp_sender), counts the send (against
-- the account, the destination and the asking host role) and wakes the deliverers (NOTIFY
-- pam_totp_outbox, no payload). Returns the outbox id, the code's salt and its hash; the code
-- itself goes only into the outbox.
CREATE FUNCTION pam_totp_api.queue_code(p_user text, p_kind text, p_destination text, p_host text, p_clock bigint,
                                        OUT id bigint, OUT salt bytea, OUT hash bytea, OUT digits integer, OUT expires_at bigint)
LANGUAGE plpgsql
AS $$
DECLARE cfg pam_totp.settings%ROWTYPE; code text;
BEGIN
  IF p_host IS NULL OR p_host !~ '^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$' THEN
    RAISE EXCEPTION 'a host name must be 1 to 64 letters, digits, dots and hyphens' USING ERRCODE = 'PT018';
  END IF;
  SELECT * INTO cfg FROM pam_totp.settings;
  digits := cfg.oob_digits;
  code := pam_totp_api.random_code(digits);
  salt := pam_totp_crypto.gen_random_bytes(16);
  hash := pam_totp_crypto.digest(salt || convert_to(code, 'UTF8'), 'sha256');
  expires_at := p_clock + cfg.oob_lifetime;
  INSERT INTO pam_totp.outbox (user_name, kind, destination, code, host, minutes, queued, expires_at)
  VALUES (p_user, p_kind, p_destination, code, p_host, (cfg.oob_lifetime + 59) / 60, p_clock, expires_at)
  RETURNING outbox.id INTO id;
  INSERT INTO pam_totp.sends (user_name, at, destination_key, host)
  VALUES (p_user, p_clock, pam_totp_api.destination_key(p_kind, p_destination), pam_totp_api.me());
  DELETE FROM pam_totp.sends s WHERE s.at < p_clock - 86400;
  DELETE FROM pam_totp.outbox o WHERE o.queued < p_clock - 7 * 86400;
  PERFORM pg_notify('pam_totp_outbox', '');
END $$;

-- An answer uses one attempt of p_user's outstanding code (p_which 'sent': a login's,
-- 'enrolment': an enrolment's); the last one voids it. Returns the attempts left (NULL: none
-- was outstanding). One statement on every login (the delete only when the last is used).
CREATE FUNCTION pam_totp_api.use_attempt(p_which text, p_user text) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE left_ integer;
BEGIN
  IF p_which = 'sent' THEN
    UPDATE pam_totp.sent_codes x SET attempts_left = greatest(x.attempts_left - 1, 0) WHERE x.user_name = p_user
    RETURNING x.attempts_left INTO left_;
    IF left_ = 0 THEN DELETE FROM pam_totp.sent_codes x WHERE x.user_name = p_user; END IF;
  ELSE
    UPDATE pam_totp.enrolment_codes x SET attempts_left = greatest(x.attempts_left - 1, 0) WHERE x.user_name = p_user
    RETURNING x.attempts_left INTO left_;
    IF left_ = 0 THEN DELETE FROM pam_totp.enrolment_codes x WHERE x.user_name = p_user; END IF;
  END IF;
  RETURN left_;
END $$;

-- Raises unless an attempt was found for the finishing role (p_found) and the transaction that
-- began it (p_xact) has committed: a verdict is told only once its counted attempt is durable
-- (login_finish, confirm_enrolment_finish). p_finish, p_begin: the two steps' names.
CREATE FUNCTION pam_totp_api.require_committed(p_found boolean, p_xact xid8, p_finish text, p_begin text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  IF NOT p_found THEN
    RAISE EXCEPTION '%: no such attempt of this role (each is finished once)', p_finish USING ERRCODE = 'PT020';
  END IF;
  IF pg_xact_status(p_xact) IS DISTINCT FROM 'committed' THEN
    RAISE EXCEPTION '%: commit % first (a verdict is told only once its attempt is durable)', p_finish, p_begin USING ERRCODE = 'PT021';
  END IF;
END $$;

-- Raises unless p's collation (the calling function's input collation) compares byte for byte.
-- A PL/pgSQL function takes its input collation from its arguments: `'alice' COLLATE
-- pg_temp.ci` (a nondeterministic collation a host may create) would make every `name =
-- p_user` case-insensitive and lend ALICE's proof to alice. Every entry point that checks or
-- records a proof calls this first.
CREATE FUNCTION pam_totp_api.require_exact_names(p text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF NOT coalesce((SELECT c.collisdeterministic FROM pg_catalog.pg_collation c
                    WHERE c.oid = pg_catalog.pg_collation_for(p)::pg_catalog.regcollation), false) THEN
    RAISE EXCEPTION 'pam_totp compares user names byte for byte: call without a nondeterministic COLLATE' USING ERRCODE = 'PT019';
  END IF;
END $$;

-- Rule 20 (docs/ARCHITECTURE.md, section 4; docs/FLEET.md, "Host credentials"): who calls. Every
-- function a host may call names its caller with this first and keeps the name for the call
-- (pam_totp.caller, set to the end of the transaction: every entry point sets it again before
-- anything reads it, so a value left there, or set by a caller, is never taken), and every
-- attempt, proof, send and audit row of the call is that name's (me). In READ COMMITTED only:
-- an older snapshot (REPEATABLE READ, SERIALIZABLE) could still see a removed host's key.
-- p_credential NULL: the caller is its login role (session_user), as a host with a role of its
-- own; refused for a member of pam_totp_pooled (a role that stands for many hosts) and for a
-- removed host's name. Else 'v1:HOST:STAMP:NONCE:MAC' (pam-totpd's HostCredential): HOST a name
-- add_host gave a key, STAMP the host's clock in seconds (at most 60 s from the database's),
-- NONCE 16 random bytes in hex, MAC the HMAC-SHA-256 under HOST's key of the lines
-- 'pam_totp host call v1', HOST, STAMP, NONCE, p_op, then each of p_args (the call's arguments
-- as canonical text: NULL '-', else '+' || its length in bytes || ':' || it), each line ended
-- by a newline. It is accepted once (its nonce is kept two minutes) and only for that operation
-- with those arguments: a credential read from a statement log can only repeat its own call,
-- and only if that call rolled back, within its minute (docs/FLEET.md). The database's encoding
-- must be UTF8 (lengths are counted in its bytes, as the host counts UTF-8's). p_reading: the
-- call writes nothing but its nonce (enrolled, enrolled_uid, user_status, list_factors,
-- check_enrollable); first in its transaction, that transaction then commits without waiting
-- for the disk (synchronous_commit off: a read used to be a read-only transaction, the nonce made
-- it wait for a WAL flush): a crash may forget the last moment's nonces of reads, whose
-- credentials could then repeat those reads within their minute.
CREATE FUNCTION pam_totp_api.identify(p_credential text, p_op text, p_args text[], p_reading boolean DEFAULT false) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
  part text[];
  k bytea;
  stamp bigint;
  msg text;
  clock bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'pam_totp''s calls run in READ COMMITTED (this transaction is %)', current_setting('transaction_isolation')
      USING ERRCODE = 'PT044';
  END IF;
  IF p_credential IS NULL THEN
    -- (A superuser is a member of every role: an admin is never taken for a pool.)
    IF pg_has_role(session_user, 'pam_totp_pooled', 'MEMBER') AND NOT pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN
      RAISE EXCEPTION 'role % stands for many hosts (pam_totp_pooled): every call needs the host''s credential (host_credential = PATH, from pam-totpd add-host)', session_user
        USING ERRCODE = 'PT035';
    END IF;
    IF EXISTS (SELECT 1 FROM pam_totp.hosts h WHERE h.name = session_user AND h.key IS NULL) THEN
      RAISE EXCEPTION 'host % was removed (pam-totpd remove-host)', session_user USING ERRCODE = 'PT036';
    END IF;
    RETURN session_user;
  END IF;
  IF p_credential !~ '^v1:[A-Za-z0-9][A-Za-z0-9._-]{0,62}:[0-9]{1,12}:[0-9a-f]{32}:[0-9a-f]{64}$' THEN
    RAISE EXCEPTION 'a host credential is v1:HOST:STAMP:NONCE:MAC' USING ERRCODE = 'PT037';
  END IF;
  part := string_to_array(p_credential, ':');
  SELECT h.key INTO k FROM pam_totp.hosts h WHERE h.name = part[2] AND h.key IS NOT NULL;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'host % has no key here (never added, or removed: pam-totpd add-host)', part[2] USING ERRCODE = 'PT038';
  END IF;
  clock := pam_totp_api.now_seconds();
  stamp := part[3]::bigint;
  SELECT 'pam_totp host call v1' || E'\n' || part[2] || E'\n' || part[3] || E'\n' || part[4] || E'\n' || p_op || E'\n'
         || coalesce(string_agg(CASE WHEN a IS NULL THEN '-' ELSE '+' || octet_length(a) || ':' || a END || E'\n', '' ORDER BY i), '')
    INTO msg FROM unnest(p_args) WITH ORDINALITY x(a, i);
  -- Compared as their SHA-256s: how long the comparison takes says nothing about the MAC.
  IF pam_totp_crypto.digest(pam_totp_crypto.hmac(convert_to(msg, 'UTF8'), k, 'sha256'), 'sha256')
     <> pam_totp_crypto.digest(decode(part[5], 'hex'), 'sha256') THEN
    RAISE EXCEPTION 'host %''s credential does not match this call (another key, or altered)', part[2] USING ERRCODE = 'PT039';
  END IF;
  IF abs(clock - stamp) > 60 THEN
    RAISE EXCEPTION 'host %''s credential is stamped % s from the database''s clock (at most 60: check the host''s clock)',
      part[2], clock - stamp USING ERRCODE = 'PT040';
  END IF;
  IF p_reading AND pg_current_xact_id_if_assigned() IS NULL THEN PERFORM set_config('synchronous_commit', 'off', true); END IF;
  INSERT INTO pam_totp.host_nonces (host, nonce, at) VALUES (part[2], decode(part[4], 'hex'), clock) ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'host %''s credential was used already (each call has its own)', part[2] USING ERRCODE = 'PT041';
  END IF;
  -- A nonce is kept until its stamp can no longer pass (at most 120 s after it was accepted);
  -- swept now and then, a few thousand rows at most, none another call holds (SKIP LOCKED:
  -- no call waits on another's sweep).
  IF random() < 0.01 THEN
    DELETE FROM pam_totp.host_nonces n WHERE n.ctid IN (
      SELECT x.ctid FROM pam_totp.host_nonces x WHERE x.at < clock - 121 LIMIT 5000 FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN part[2];
END $$;

-- The caller identify named for this call (its session's role for an owner's direct call).
CREATE FUNCTION pam_totp_api.me() RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT coalesce(nullif(current_setting('pam_totp.caller', true), ''), session_user::text) $$;

-- A second step (login_finish, confirm_enrolment_finish) is the first step's caller's: with a
-- credential of its own (p_op, over the first step's credential's nonce p_nonce, so it is made
-- before the attempt's id is known and is good for that attempt only), or as the same login role
-- when the first step had none. Names the caller for the call; false: not its.
CREATE FUNCTION pam_totp_api.finishing(p_role text, p_nonce text, p_credential text, p_op text) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
  IF p_nonce IS NULL THEN
    RETURN p_credential IS NULL AND pam_totp_api.identify(NULL, NULL, NULL) = p_role;
  END IF;
  RETURN p_credential IS NOT NULL AND pam_totp_api.identify(p_credential, p_op, ARRAY[p_nonce]) = p_role;
END $$;

-- A credential's canonical text of an array argument (identify): each element as its length in
-- bytes, ':' and it (a bytea in lower-case hex), a NULL element as '-'; NULL for NULL (STRICT),
-- as any argument, and '' for none.
CREATE FUNCTION pam_totp_api.canonical(p text[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$
  SELECT coalesce(string_agg(CASE WHEN x IS NULL THEN '-' ELSE octet_length(x) || ':' || x END, '' ORDER BY i), '')
    FROM unnest(p) WITH ORDINALITY u(x, i)
$$;

CREATE FUNCTION pam_totp_api.canonical(p bytea[]) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT pam_totp_api.canonical(ARRAY(SELECT encode(x, 'hex') FROM unnest(p) WITH ORDINALITY u(x, i) ORDER BY i)) $$;

-- Admin (pam-totpd add-host NAME): a new host and its key, made here and returned once (it is
-- never a statement's argument, so no statement log holds it). A removed name may be added
-- again, with a new key; a current one is refused (remove it first: its old key then stops).
CREATE FUNCTION pam_totp_api.add_host(p_name text) RETURNS bytea
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE k bytea := pam_totp_crypto.gen_random_bytes(32); clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);
  IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$' THEN
    RAISE EXCEPTION 'a host''s name is 1 to 63 letters, digits, dots, underscores and hyphens, the first a letter or digit'
      USING ERRCODE = 'PT043';
  END IF;
  -- A host's name is a host's: a login role of that name must be a host's own (the way to move
  -- a host with a role onto a credential), never an admin's, a superuser's or another role's.
  IF EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_name
              AND (r.rolsuper OR NOT pg_has_role(r.oid, 'pam_totp_host', 'MEMBER') OR pg_has_role(r.oid, 'pam_totp_admin', 'MEMBER')
                   OR pg_has_role(r.oid, 'pam_totp_pooled', 'MEMBER'))) THEN
    RAISE EXCEPTION 'a role named % exists and is not a host''s own (a member of pam_totp_host alone): choose another name', p_name
      USING ERRCODE = 'PT045';
  END IF;
  INSERT INTO pam_totp.hosts AS h (name, key, added) VALUES (p_name, k, clock)
  ON CONFLICT (name) DO UPDATE SET key = EXCLUDED.key, added = EXCLUDED.added, removed = NULL WHERE h.key IS NULL;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'host % has a key already: pam-totpd remove-host % first (its old key then stops at once)', p_name, p_name
      USING ERRCODE = 'PT042';
  END IF;
  PERFORM pam_totp_api.audit_append('host-added', p_name, NULL, NULL, NULL, 0, 'a new key for host ' || p_name);
  RETURN k;
END $$;

-- Admin (pam-totpd remove-host NAME): the host's key goes, so its next call is refused, with or
-- without a credential (a role of that name too). False: no such current host.
CREATE FUNCTION pam_totp_api.remove_host(p_name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);
  IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$' THEN RETURN false; END IF;
  INSERT INTO pam_totp.hosts AS h (name, key, added, removed) VALUES (p_name, NULL, clock, clock)
  ON CONFLICT (name) DO UPDATE SET key = NULL, removed = EXCLUDED.removed WHERE h.key IS NOT NULL;
  IF NOT FOUND THEN RETURN false; END IF;
  DELETE FROM pam_totp.host_nonces n WHERE n.host = p_name::name;
  PERFORM pam_totp_api.audit_append('host-removed', p_name, NULL, NULL, NULL, 0, 'host ' || p_name || ' removed: its calls are refused');
  RETURN true;
END $$;

-- Raises unless the session may change p_user's enrolment now: a code of that user accepted
-- through the same host (me: identify) within settings.proof_seconds, or a role with
-- pam_totp_admin. The caller holds the user's row lock. A compromised host can therefore not
-- add a factor or recovery codes of its own for a user it never saw log in.
CREATE FUNCTION pam_totp_api.require_proof(p_user text) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
  IF pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM pam_totp.users u
                  WHERE u.name = p_user AND u.proof_role = pam_totp_api.me() AND u.proof_until >= pam_totp_api.now_seconds()) THEN
    RAISE EXCEPTION 'changing the factors or recovery codes of a user who has a factor needs a current code of that user through this host first (within 10 minutes), or a role with pam_totp_admin' USING ERRCODE = 'PT013';
  END IF;
END $$;

-- Locks p_user's row and checks the session may change a user who has a factor (a first
-- factor needs no proof: trust on first use, as with the file store). Returns whether the
-- user had a factor.
CREATE FUNCTION pam_totp_api.lock_for_change(p_user text) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE had boolean;
BEGIN
  PERFORM pam_totp_api.require_exact_names(p_user);
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  had := EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user);
  IF had THEN PERFORM pam_totp_api.require_proof(p_user); END IF;
  RETURN had;
END $$;

-- A time for the audit trail's details: "2026-11-24 09:30:05 UTC".
CREATE FUNCTION pam_totp_api.utc_text(t bigint) RETURNS text
LANGUAGE sql STABLE STRICT
AS $$
  SELECT to_char(to_timestamp(least(t, 253402300799)) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
$$;

-- A drift in steps with its sign, as the host's logs write it: "+3", "-2", "0".
CREATE FUNCTION pam_totp_api.signed(v integer) RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT CASE WHEN v > 0 THEN '+' || v ELSE v::text END $$;

-- One row of the audit trail (pam_totp.audit), in the caller's transaction: a change and its
-- row commit together. Called only by the functions here (EXECUTE is nobody's). Deletes a few
-- rows past settings.audit_days on the way (SKIP LOCKED: concurrent logins never wait on it).
CREATE FUNCTION pam_totp_api.audit_append(p_event text, p_account text, p_uid bigint, p_label text,
                                          p_failures integer, p_locked_until bigint, p_detail text) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE clock bigint := pam_totp_api.now_seconds();
BEGIN
  DELETE FROM pam_totp.audit WHERE id IN (
    SELECT a.id FROM pam_totp.audit a
     WHERE a.at < clock - 86400::bigint * (SELECT s.audit_days FROM pam_totp.settings s)
     ORDER BY a.at LIMIT 8 FOR UPDATE SKIP LOCKED);
  INSERT INTO pam_totp.audit (at, role, account, uid, event, label, failures, locked_until, detail)
  VALUES (clock, pam_totp_api.me(), p_account, p_uid, p_event, p_label, p_failures, nullif(p_locked_until, 0), p_detail);
END $$;

-- Each kind's check (docs/ARCHITECTURE.md, section 2.3): one function per kind, dispatched in
-- one place (check_factor). Each computes its kind's whole window, no early exit. step: the
-- first step it matched above the factor's last used one (NULL: none); replayed: it matched a
-- used one.

-- TOTP: the host's rule (TOTPVerifier.match and .drift, "Clock drift"): the window is the
-- 2N+1 steps of N = p_window centred on now + the learned drift (bounded to ±N, the centre
-- saturating at 0); a match teaches its offset from now, bounded to ±N. So no code is accepted
-- more than 2N steps from the database's clock, and N = 0 learns nothing. p_wanted: the code
-- as a number (-1: not one of the factor's length).
CREATE FUNCTION pam_totp_api.check_totp(f pam_totp.factors, p_wanted bigint, p_now bigint, p_window integer,
                                        OUT step bigint, OUT replayed boolean, OUT drift integer, OUT drift_before integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE now_step bigint := p_now / f.period; centre bigint;
BEGIN
  replayed := false; drift := 0;
  drift_before := greatest(least(f.drift, p_window), -p_window);
  centre := greatest(now_step + drift_before, 0);
  FOR s IN greatest(centre - p_window, 0) .. centre + p_window LOOP
    IF pam_totp_api.hotp(f.secret, s, f.algorithm, f.digits) = p_wanted THEN
      IF s > f.last_step THEN step := coalesce(step, s); ELSE replayed := true; END IF;
    END IF;
  END LOOP;
  IF step IS NOT NULL THEN drift := greatest(least(step - now_step, p_window), -p_window); END IF;
END $$;

-- HOTP: the last used counter (a replay) and the p_hotp_window counters after it (bigint:
-- counters go past an integer FOR loop's range; the table bounds them at 2^48). Then the
-- resync reach: counters last + 1 + p_hotp_window .. last + p_resync (and the one after it,
-- for a pair's second code); far: the answer is a code there (alone never accepted).
-- p_previous: the login's answer before, a far one; this answer then matches too if the two
-- are the codes of two consecutive counters of the reach (the second is the step). One
-- question per login with forward_pass: no resync. Below 2^48 (factors_counter_bound): a
-- pair's second code is at most 2^48.
CREATE FUNCTION pam_totp_api.check_hotp(f pam_totp.factors, p_wanted bigint, p_previous text, p_hotp_window integer,
                                        p_resync integer, p_forward_pass boolean,
                                        OUT step bigint, OUT replayed boolean, OUT far boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE c bigint; first_wanted bigint; v integer; pair bigint; first_equal boolean := false; reach_end bigint;
BEGIN
  replayed := false; far := false;
  c := greatest(f.last_step, 0);
  WHILE c <= f.last_step + p_hotp_window LOOP
    IF pam_totp_api.hotp(f.secret, c, f.algorithm, f.digits) = p_wanted THEN
      IF c > f.last_step THEN step := coalesce(step, c); ELSE replayed := true; END IF;
    END IF;
    c := c + 1;
  END LOOP;
  IF NOT p_forward_pass AND p_resync > p_hotp_window THEN
    first_wanted := CASE WHEN octet_length(p_previous) = f.digits AND p_previous ~ '^[0-9]+$' THEN p_previous::bigint ELSE -1 END;
    reach_end := least(f.last_step + p_resync, 281474976710655);
    c := f.last_step + 1 + p_hotp_window;
    WHILE c <= reach_end + 1 LOOP
      v := pam_totp_api.hotp(f.secret, c, f.algorithm, f.digits);
      IF c <= reach_end AND v = p_wanted THEN far := true; END IF;
      IF first_equal AND v = p_wanted THEN pair := coalesce(pair, c); END IF;
      first_equal := c <= reach_end AND v = first_wanted;
      c := c + 1;
    END LOOP;
    step := coalesce(step, pair);
  END IF;
END $$;

-- A sent code (sms, email): the code the database sent for this factor, if one is outstanding
-- (send_code): its salted SHA-256; a match is "step" the code's id, above the factor's last
-- used one.
CREATE FUNCTION pam_totp_api.check_sent(f pam_totp.factors, p_answer text, p_now bigint, p_forward_pass boolean,
                                        OUT step bigint, OUT replayed boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE code text; sent pam_totp.sent_codes%ROWTYPE;
BEGIN
  replayed := false;
  SELECT * INTO sent FROM pam_totp.sent_codes x WHERE x.user_name = f.user_name AND x.factor_id = f.id;
  IF FOUND AND sent.expires_at > p_now AND sent.attempts_left > 0 THEN
    code := CASE WHEN p_forward_pass THEN right(p_answer, sent.digits) ELSE p_answer END;
    IF octet_length(code) = sent.digits AND code ~ '^[0-9]+$'
       AND pam_totp_crypto.digest(sent.salt || convert_to(code, 'UTF8'), 'sha256') = sent.hash THEN
      IF sent.id > f.last_step THEN step := sent.id; ELSE replayed := true; END IF;
    END IF;
  END IF;
END $$;

-- One factor's verdict on an answer: the dispatch on the factor's kind, once, to the kind's
-- check above. far: (HOTP) a code past the window within p_resync counters of the next one;
-- drift_before: the factor's learned clock drift (TOTP), bounded to ±p_window; drift: the one
-- a match at step teaches (both 0 for the other kinds).
CREATE FUNCTION pam_totp_api.check_factor(f pam_totp.factors, p_answer text, p_previous text, p_now bigint, p_window integer,
                                          p_hotp_window integer, p_resync integer, p_forward_pass boolean,
                                          OUT step bigint, OUT replayed boolean, OUT far boolean,
                                          OUT drift integer, OUT drift_before integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE code text := CASE WHEN p_forward_pass THEN right(p_answer, f.digits) ELSE p_answer END; wanted bigint;
BEGIN
  far := false; drift := 0; drift_before := 0;
  wanted := CASE WHEN octet_length(code) = f.digits AND code ~ '^[0-9]+$' THEN code::bigint ELSE -1 END;
  CASE f.kind
  WHEN 'totp' THEN
    SELECT t.step, t.replayed, t.drift, t.drift_before INTO step, replayed, drift, drift_before
      FROM pam_totp_api.check_totp(f, wanted, p_now, p_window) t;
  WHEN 'hotp' THEN
    SELECT h.step, h.replayed, h.far INTO step, replayed, far
      FROM pam_totp_api.check_hotp(f, wanted, p_previous, p_hotp_window, p_resync, p_forward_pass) h;
  WHEN 'sms', 'email' THEN
    SELECT x.step, x.replayed INTO step, replayed FROM pam_totp_api.check_sent(f, p_answer, p_now, p_forward_pass) x;
  END CASE;
END $$;

-- The verdict of one answer against p_user's factors and recovery codes at p_now, with no
-- change. Every factor is checked (check_factor); the first in record order that matched an
-- unused step wins. A recovery-code-shaped answer costs one PBKDF2 whether or not a factor
-- matched, so a right code costs what a wrong one does.
CREATE FUNCTION pam_totp_api.judge(p_user text, p_answer text, p_previous text, p_now bigint, p_window integer,
                                   p_hotp_window integer, p_resync integer, p_forward_pass boolean,
                                   OUT factor_id bigint, OUT label text, OUT step bigint, OUT digits integer,
                                   OUT recovery_set bigint, OUT recovery_index integer, OUT replayed boolean,
                                   OUT far boolean, OUT drift integer, OUT drift_before integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
  f pam_totp.factors%ROWTYPE;
  m record;
  r pam_totp.recovery%ROWTYPE;
  digits_only text; h bytea;
BEGIN
  replayed := false; far := false; drift := 0; drift_before := 0;
  FOR f IN SELECT * FROM pam_totp.factors x WHERE x.user_name = p_user ORDER BY x.id LOOP
    m := pam_totp_api.check_factor(f, p_answer, p_previous, p_now, p_window, p_hotp_window, p_resync, p_forward_pass);
    IF m.step IS NOT NULL AND factor_id IS NULL THEN
      factor_id := f.id; label := f.label; step := m.step; digits := f.digits;
      drift := m.drift; drift_before := m.drift_before;
    END IF;
    replayed := replayed OR m.replayed;
    far := far OR m.far;
  END LOOP;

  IF NOT p_forward_pass AND p_answer ~ '^[0-9 -]+$' THEN
    digits_only := regexp_replace(p_answer, '[ -]', '', 'g');
    IF length(digits_only) BETWEEN 8 AND 32 THEN
      SELECT * INTO r FROM pam_totp.recovery WHERE user_name = p_user;
      IF FOUND THEN
        h := pam_totp_api.pbkdf2_sha256(convert_to(digits_only, 'UTF8'), r.salt, r.iterations);
        FOR i IN 1 .. cardinality(r.hashes) LOOP
          IF r.hashes[i] = h AND (r.used >> (i - 1)) & 1 = 0 AND recovery_index IS NULL THEN
            recovery_set := r.set_id; recovery_index := i - 1;
          END IF;
        END LOOP;
      END IF;
    END IF;
  END IF;
END $$;

-- Attempts never finished were counted when they began (the audit trail says so): the rows
-- themselves go an hour later.
CREATE FUNCTION pam_totp_api.sweep_attempts(p_clock bigint) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  j pam_totp.attempts%ROWTYPE;
BEGIN
  FOR j IN DELETE FROM pam_totp.attempts x WHERE x.begun < p_clock - 3600 RETURNING x.* LOOP
    IF j.verdict IN ('match', 'recovery', 'wrong', 'resync') THEN
      PERFORM pam_totp_api.audit_append('unfinished', j.user_name, j.uid, NULL, j.failures, j.locked_until,
                                        'begun at ' || pam_totp_api.utc_text(j.begun) || ', never finished: counted as a failure');
    END IF;
  END LOOP;
END $$;

-- A login, first step: checks the answer under the user's row lock and records the attempt,
-- counted as a failure (with the lockout it brings) whatever the answer was; returns only the
-- attempt's id. Nothing a caller can read differs between a right and a wrong answer until
-- login_finish, which answers only once this transaction has committed: no savepoint,
-- rollback, aborted statement or killed session turns a wrong guess into an uncounted one.
-- `p_now` is the caller's clock: for the owner (tests, which then call login_finish in a
-- second statement); hosts call login_begin, or the procedure login. `p_previous`: the login's
-- answer before this one, told 'resync' (check_factor).
CREATE FUNCTION pam_totp_api.login_begin_at(p_user text, p_uid bigint, p_answer text, p_now bigint, p_window integer,
                                            p_max_failures integer, p_lockout bigint, p_forward_pass boolean,
                                            p_previous text DEFAULT NULL, p_credential text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  u pam_totp.users%ROWTYPE;
  j record;
  win integer; maxf integer; lock_for bigint;
  verdict_ text; fails integer := 0; until_ bigint := 0;
  decoy integer;
  id_ bigint;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM pam_totp_api.require_exact_names(p_user);
  IF p_user IS NULL OR p_answer IS NULL OR p_now IS NULL OR p_now < 0 THEN
    RAISE EXCEPTION 'login: bad arguments' USING ERRCODE = 'PT022';
  END IF;
  SELECT * INTO cfg FROM pam_totp.settings;
  -- The host's adjacent_intervals (its default 5), capped by settings.max_window (default 5):
  -- a host asking for more gets the cap.
  win := least(greatest(coalesce(p_window, 0), 0), cfg.max_window);
  maxf := least(greatest(coalesce(p_max_failures, cfg.max_failures), 1), cfg.max_failures);
  lock_for := least(greatest(coalesce(p_lockout, 0), cfg.min_lockout), cfg.max_lockout);
  PERFORM pam_totp_api.sweep_attempts(clock);

  SELECT NULL::bigint AS factor_id, NULL::text AS label, NULL::bigint AS step, NULL::integer AS digits,
         NULL::bigint AS recovery_set, NULL::integer AS recovery_index, false AS replayed, false AS far,
         0 AS drift, 0 AS drift_before INTO j;
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF p_uid IS NULL OR NOT FOUND OR u.uid <> p_uid OR NOT EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    -- Not enrolled, or enrolled for another account (a reused name): the same HMACs as one
    -- SHA-1 factor's window first, so the answer takes about as long as an enrolled user's.
    SELECT sum(pam_totp_api.hotp('\x0000000000000000000000000000000000000000'::bytea, i, 'sha1', 6)) INTO decoy
      FROM generate_series(0, 2 * win) i;
    verdict_ := 'unenrolled';
  ELSE
    SELECT * INTO j FROM pam_totp_api.judge(p_user, p_answer, p_previous, p_now, win, cfg.hotp_window, cfg.hotp_resync_window,
                                            p_forward_pass);
    IF u.failures >= cfg.hard_failure_cap THEN
      verdict_ := 'locked'; fails := u.failures; until_ := 9223372036854775807;
    ELSIF p_now < u.locked_until THEN
      verdict_ := 'locked'; fails := u.failures; until_ := u.locked_until;
    ELSE
      -- Every maxf-th failure (the caller's, if stricter) and every database max_failures-th.
      fails := u.failures + 1;
      IF lock_for > 0 AND (fails % maxf = 0 OR fails % cfg.max_failures = 0) THEN until_ := p_now + lock_for; END IF;
      UPDATE pam_totp.users SET failures = fails, locked_until = CASE WHEN until_ > 0 THEN until_ ELSE pam_totp.users.locked_until END
       WHERE name = p_user;
      -- A far code starts a resync once per login, unless this failure started a lockout.
      verdict_ := CASE WHEN j.factor_id IS NOT NULL THEN 'match' WHEN j.recovery_index IS NOT NULL THEN 'recovery'
                       WHEN j.far AND p_previous IS NULL AND until_ = 0 THEN 'resync' ELSE 'wrong' END;
      -- Every answer checked uses one of an outstanding sent code's attempts (void after the
      -- last), a right one too (its success voids the code anyway): the same writes whatever
      -- the answer, so nothing in this transaction tells a right guess from a wrong one.
      PERFORM pam_totp_api.use_attempt('sent', p_user);
    END IF;
  END IF;
  INSERT INTO pam_totp.attempts (role, xact, begun, at, user_name, uid, verdict, factor_id, step, label, digits,
                                 recovery_set, recovery_index, replayed, failures, locked_until, drift, drift_before, nonce)
  VALUES (pam_totp_api.me(), pg_current_xact_id(), clock, p_now, p_user, p_uid, verdict_, j.factor_id, j.step, j.label, j.digits,
          j.recovery_set, j.recovery_index, coalesce(j.replayed, false), fails, until_, coalesce(j.drift, 0),
          coalesce(j.drift_before, 0), split_part(p_credential, ':', 4))
  RETURNING id INTO id_;
  RETURN id_;
END $$;

-- What a host calls: on the database's clock, so no host can pick the time.
CREATE FUNCTION pam_totp_api.login_begin(p_user text, p_uid bigint, p_answer text, p_window integer,
                                         p_max_failures integer, p_lockout bigint, p_forward_pass boolean,
                                         p_previous text DEFAULT NULL, p_credential text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN  -- PL/pgSQL: see hotp (the procedure login calls it once a login)
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'login_begin',
    ARRAY[p_user, p_uid::text, p_answer, p_window::text, p_max_failures::text, p_lockout::text, p_forward_pass::text, p_previous]), true);
  RETURN pam_totp_api.login_begin_at(p_user, p_uid, p_answer, pam_totp_api.now_seconds(), p_window, p_max_failures, p_lockout,
                                     p_forward_pass, p_previous, p_credential);
END $$;

-- login_finish's accepting step, under the user's row lock: a match marks its step used
-- (compare-and-set: of two attempts with one code, one succeeds) and records the clock drift
-- it taught (check_factor; a change of settings.drift_jump_steps or more is said in the audit
-- row, as a host logs it), a recovery code its bit; either clears the failures login_begin
-- counted and records the proof (require_proof). outcome NULL: nothing was accepted
-- (replayed: the step was used meanwhile).
CREATE FUNCTION pam_totp_api.accept_attempt(a pam_totp.attempts, p_proof_seconds bigint,
                                            OUT outcome text, OUT remaining integer, OUT replayed boolean)
LANGUAGE plpgsql
AS $$
DECLARE
  used_now bigint;
BEGIN
  replayed := false;
  PERFORM 1 FROM pam_totp.users u WHERE u.name = a.user_name AND u.uid = a.uid FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF a.verdict = 'match' THEN
    UPDATE pam_totp.factors f SET last_step = a.step, drift = CASE WHEN f.kind = 'totp' THEN a.drift ELSE 0 END
     WHERE f.id = a.factor_id AND f.user_name = a.user_name AND f.last_step < a.step;
    IF NOT FOUND THEN replayed := true; RETURN; END IF;   -- another login used this step since login_begin
    outcome := 'success';
    PERFORM pam_totp_api.audit_append('success', a.user_name, a.uid, a.label, 0, 0,
                                      CASE WHEN abs(a.drift - a.drift_before) >= (SELECT s.drift_jump_steps FROM pam_totp.settings s)
                                           THEN 'clock drift jumped from ' || pam_totp_api.signed(a.drift_before) || ' to '
                                                || pam_totp_api.signed(a.drift) || ' steps (check the device''s clock)' END);
  ELSE
    UPDATE pam_totp.recovery r SET used = r.used | (1::bigint << a.recovery_index)
     WHERE r.user_name = a.user_name AND r.set_id = a.recovery_set AND (r.used >> a.recovery_index) & 1 = 0
    RETURNING r.used INTO used_now;
    IF NOT FOUND THEN RETURN; END IF;
    outcome := 'recovery';
    SELECT count(*)::integer INTO remaining FROM pam_totp.recovery r, generate_series(0, cardinality(r.hashes) - 1) i
     WHERE r.user_name = a.user_name AND (used_now >> i) & 1 = 0;
    PERFORM pam_totp_api.audit_append('recovery', a.user_name, a.uid, NULL, 0, 0, remaining || ' recovery codes left');
  END IF;
  UPDATE pam_totp.users u SET failures = 0, locked_until = 0, proof_role = a.role, proof_until = a.at + p_proof_seconds
   WHERE u.name = a.user_name;
  DELETE FROM pam_totp.sent_codes x WHERE x.user_name = a.user_name;   -- any success voids a sent code
END $$;

-- A login, second step: the verdict of an attempt whose login_begin has committed, told once,
-- to the role that began it. A match marks its step used (compare-and-set under the row lock:
-- of two attempts with one code, one succeeds), clears the failure login_begin counted and
-- records the proof (require_proof); an attempt older than settings.attempt_seconds stays a
-- failure.
CREATE FUNCTION pam_totp_api.login_finish(p_attempt bigint, p_credential text DEFAULT NULL)
RETURNS TABLE (outcome text, label text, step bigint, digits integer, failures integer,
               locked_until bigint, replayed boolean, remaining integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  a pam_totp.attempts%ROWTYPE;
  cfg pam_totp.settings%ROWTYPE;
  acc record;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  SELECT * INTO a FROM pam_totp.attempts x WHERE x.id = p_attempt FOR UPDATE;
  PERFORM pam_totp_api.require_committed(FOUND AND pam_totp_api.finishing(a.role, a.nonce, p_credential, 'login_finish'),
                                         a.xact, 'login_finish', 'login_begin');
  PERFORM set_config('pam_totp.caller', a.role, true);
  DELETE FROM pam_totp.attempts x WHERE x.id = a.id;
  SELECT * INTO cfg FROM pam_totp.settings;
  IF a.verdict IN ('match', 'recovery') AND clock - a.begun <= cfg.attempt_seconds THEN
    acc := pam_totp_api.accept_attempt(a, cfg.proof_seconds);
    IF acc.outcome = 'success' THEN
      RETURN QUERY SELECT 'success'::text, a.label, a.step, a.digits, 0, 0::bigint, false, NULL::integer;
      RETURN;
    ELSIF acc.outcome = 'recovery' THEN
      RETURN QUERY SELECT 'recovery'::text, NULL::text, NULL::bigint, NULL::integer, 0, 0::bigint, false, acc.remaining;
      RETURN;
    END IF;
    a.replayed := a.replayed OR acc.replayed;
  END IF;
  IF a.verdict = 'locked' OR a.verdict = 'unenrolled' THEN
    -- A login of a name with no factor is not an event of the trail (nothing was checked).
    IF a.verdict = 'locked' THEN
      PERFORM pam_totp_api.audit_append('locked', a.user_name, a.uid, NULL, a.failures, a.locked_until, 'refused');
    END IF;
    RETURN QUERY SELECT a.verdict, NULL::text, NULL::bigint, NULL::integer, a.failures, a.locked_until, false, NULL::integer;
    RETURN;
  END IF;
  PERFORM pam_totp_api.audit_append('failure', a.user_name, a.uid, NULL, a.failures, a.locked_until,
                                    CASE WHEN a.replayed THEN 'a used code'
                                         WHEN a.verdict = 'resync' THEN 'a code past a token''s window: the next one asked for (resync)'
                                         WHEN a.verdict = 'wrong' THEN 'wrong code'
                                         WHEN clock - a.begun > cfg.attempt_seconds THEN 'a right code, finished too late'
                                         ELSE 'a code used by another login meanwhile' END);
  RETURN QUERY SELECT CASE WHEN a.verdict = 'resync' THEN 'resync' ELSE 'wrong' END, NULL::text, NULL::bigint, NULL::integer,
                      a.failures, a.locked_until, a.replayed, NULL::integer;
END $$;

-- One login in one call, for pam-totpd: login_begin, COMMIT, login_finish. A procedure that
-- commits cannot be SECURITY DEFINER or carry SET options, so it runs as its caller and names
-- everything by schema; the two functions it calls are what enforce the order. Called inside
-- a transaction block or a block with an exception handler, its COMMIT fails and nothing is
-- told.
-- p_timeout_ms: the call's deadline, from when the server received it (rule 19: never left on
-- a session). A procedure that commits must be its pipeline's only statement (PostgreSQL 18
-- runs a later one in a transaction block), so the caller cannot set statement_timeout before
-- it: it bounds every lock wait with lock_timeout in each of its transactions, and past the
-- deadline it stops before login_finish, or rolls login_finish back (57014, as a cancelled
-- statement): a login past its deadline spends no code and audits no success.
CREATE PROCEDURE pam_totp_api.login(p_user text, p_uid bigint, p_answer text, p_window integer,
                                    p_max_failures integer, p_lockout bigint, p_forward_pass boolean,
                                    INOUT outcome text DEFAULT NULL, INOUT label text DEFAULT NULL, INOUT step bigint DEFAULT NULL,
                                    INOUT digits integer DEFAULT NULL, INOUT failures integer DEFAULT NULL,
                                    INOUT locked_until bigint DEFAULT NULL, INOUT replayed boolean DEFAULT NULL,
                                    INOUT remaining integer DEFAULT NULL,
                                    -- Last, so that callers passing the INOUT arguments by
                                    -- position are not moved: given by name (p_previous => ...).
                                    p_previous text DEFAULT NULL, p_timeout_ms integer DEFAULT NULL,
                                    p_credential text DEFAULT NULL, p_finish_credential text DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE attempt pg_catalog.int8;
  deadline timestamptz := pg_catalog.statement_timestamp() + pg_catalog.make_interval(secs => coalesce(p_timeout_ms, 0) / 1000.0);
BEGIN
  IF p_timeout_ms IS NOT NULL THEN PERFORM pg_catalog.set_config('lock_timeout', p_timeout_ms::text, true); END IF;
  attempt := pam_totp_api.login_begin(p_user, p_uid, p_answer, p_window, p_max_failures, p_lockout, p_forward_pass, p_previous,
                                      p_credential);
  COMMIT;
  IF p_timeout_ms IS NOT NULL THEN
    IF pg_catalog.clock_timestamp() >= deadline THEN
      RAISE EXCEPTION 'canceling the login: past its deadline' USING ERRCODE = '57014';
    END IF;
    PERFORM pg_catalog.set_config('lock_timeout',
      greatest(1, (pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) * 1000)::integer)::text, true);
  END IF;
  SELECT f.outcome, f.label, f.step, f.digits, f.failures, f.locked_until, f.replayed, f.remaining
    INTO outcome, label, step, digits, failures, locked_until, replayed, remaining
    FROM pam_totp_api.login_finish(attempt, p_finish_credential) f;
  IF p_timeout_ms IS NOT NULL AND pg_catalog.clock_timestamp() >= deadline THEN
    RAISE EXCEPTION 'canceling the login: past its deadline' USING ERRCODE = '57014';
  END IF;
END $$;

-- Before the prompt: the uid the user's enrolment is bound to, or NULL if not enrolled.
CREATE FUNCTION pam_totp_api.enrolled_uid(p_user text, p_credential text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'enrolled_uid', ARRAY[p_user], true), true);
  RETURN (SELECT u.uid FROM pam_totp.users u
           WHERE u.name = p_user AND EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = u.name));
END $$;

-- A user's metadata: no secret, no hash, no salt. sends: when codes were sent to the user in
-- the last day (at most the last 32, oldest first), for totp-enroll status.
CREATE FUNCTION pam_totp_api.user_status(p_user text, p_credential text DEFAULT NULL)
RETURNS TABLE (uid bigint, failures integer, locked_until bigint, recovery_set bigint, recovery_codes integer, recovery_used bigint,
               sends bigint[])
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'user_status', ARRAY[p_user], true), true);
  RETURN QUERY SELECT u.uid, u.failures, u.locked_until, r.set_id, cardinality(r.hashes), r.used,
         ARRAY(SELECT x.at FROM (SELECT s.at FROM pam_totp.sends s WHERE s.user_name = u.name
                                   AND s.at > pam_totp_api.now_seconds() - 86400 ORDER BY s.at DESC LIMIT 32) x ORDER BY x.at)
    FROM pam_totp.users u LEFT JOIN pam_totp.recovery r ON r.user_name = u.name WHERE u.name = p_user;
END $$;

-- A user's factors, in enrolment order. serial: a hardware token's serial number (NULL: none).
-- drift: a TOTP factor's learned clock drift in steps (0: none; totp-enroll status shows it).
CREATE FUNCTION pam_totp_api.list_factors(p_user text, p_credential text DEFAULT NULL)
RETURNS TABLE (label text, algorithm text, digits integer, period integer, created bigint, last_step bigint, kind text, serial text,
               destination text, drift integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'list_factors', ARRAY[p_user], true), true);
  -- A token's counter is for admins only (a host reads no secret and no counter); its
  -- serial number is not a secret. A phone or address: masked, except to an admin.
  RETURN QUERY SELECT f.label, f.algorithm, f.digits, f.period, f.created,
         CASE WHEN f.kind = 'totp' OR pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN f.last_step END, f.kind, f.serial,
         CASE WHEN pg_has_role(session_user, 'pam_totp_admin', 'MEMBER') THEN f.destination
              ELSE pam_totp_api.masked(f.kind, f.destination) END,
         f.drift
    FROM pam_totp.factors f
   WHERE f.user_name = p_user ORDER BY f.id;
END $$;

-- The checks an enrolment makes (label unique, secret unique, at most 32, same account).
-- p_secret NULL: the secret is not known yet. Raises with a message for the user.
CREATE FUNCTION pam_totp_api.enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea) RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE u pam_totp.users%ROWTYPE;
BEGIN
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user;
  IF NOT FOUND THEN RETURN; END IF;
  IF u.uid <> p_uid THEN
    RAISE EXCEPTION 'the stored record of this name belongs to another account (another uid): root must run totp-enroll purge --user NAME first' USING ERRCODE = 'PT001';
  END IF;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND label = p_label) THEN
    RAISE EXCEPTION 'a factor with this name already exists; choose another name' USING ERRCODE = 'PT002';
  END IF;
  IF (SELECT count(*) FROM pam_totp.factors WHERE user_name = p_user) >= 32 THEN
    RAISE EXCEPTION 'too many factors (32); remove one first' USING ERRCODE = 'PT003';
  END IF;
  IF p_secret IS NOT NULL AND EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND secret = p_secret) THEN
    RAISE EXCEPTION 'this secret is already enrolled as another factor' USING ERRCODE = 'PT004';
  END IF;
END $$;

-- What a host calls: enrollable, for the caller identify names.
CREATE FUNCTION pam_totp_api.check_enrollable(p_user text, p_uid bigint, p_label text, p_secret bytea,
                                              p_credential text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'check_enrollable',
    ARRAY[p_user, p_uid::text, p_label, encode(p_secret, 'hex')], true), true);
  PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, p_secret);
END $$;

-- Adds a proven factor (its enrolment step and every earlier one count as used). Write-only:
-- the secret goes in and never comes out. A user's first factor records the proof for the
-- rest of that enrolment (recovery codes, a second factor) from the same role.
-- p_enrolled_step: TOTP, the step that proved the factor; HOTP (p_kind 'hotp'), the counter
-- that proved it (-1: none, a token whose first code is counter 0). p_serial: a hardware
-- token's serial number (import-pskc), NULL for none.
CREATE FUNCTION pam_totp_api.enroll(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer,
                                    p_period integer, p_created bigint, p_enrolled_step bigint, p_secret bytea,
                                    p_kind text DEFAULT 'totp', p_serial text DEFAULT NULL, p_credential text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE had boolean;
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'enroll',
    ARRAY[p_user, p_uid::text, p_label, p_algorithm, p_digits::text, p_period::text, p_created::text, p_enrolled_step::text,
          encode(p_secret, 'hex'), p_kind, p_serial]), true);
  PERFORM pam_totp_api.require_exact_names(p_user);
  IF p_kind IS NULL OR p_kind NOT IN ('totp', 'hotp') OR p_secret IS NULL THEN
    RAISE EXCEPTION 'enroll: an app or token factor with its secret (a phone or address: send_enrolment_code)' USING ERRCODE = 'PT026';
  END IF;
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  had := pam_totp_api.lock_for_change(p_user);
  PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, p_secret);
  IF p_serial IS NOT NULL THEN
    -- A token is one user's. The lock (per serial, to the end of the transaction) makes two
    -- enrolments of one serial for two users, from any hosts at once, wait for each other.
    PERFORM pg_advisory_xact_lock(hashtextextended('pam_totp serial ' || p_serial, 0));
    IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE serial = p_serial AND user_name <> p_user) THEN
      RAISE EXCEPTION 'the token with serial % is already another user''s factor: remove it there first', p_serial
        USING ERRCODE = 'PT012';
    END IF;
  END IF;
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind, serial)
  VALUES (p_user, p_label, p_algorithm, p_digits, p_period, p_created, p_enrolled_step, p_secret, p_kind, p_serial);
  PERFORM pam_totp_api.audit_append('enroll', p_user, p_uid, p_label, NULL, 0,
                                    CASE p_kind WHEN 'hotp' THEN 'HOTP-' || upper(p_algorithm) || ', ' || p_digits || ' digits'
                                    ELSE upper(p_algorithm) || ', ' || p_digits || ' digits, ' || p_period || ' s' END
                                    || coalesce(', serial ' || p_serial, ''));
  IF NOT had THEN
    UPDATE pam_totp.users SET proof_role = pam_totp_api.me(),
                              proof_until = pam_totp_api.now_seconds() + (SELECT s.proof_seconds FROM pam_totp.settings s)
     WHERE name = p_user;
  END IF;
END $$;

-- Enrolment at first login (enroll_at_login; docs/FLEET.md): a TOTP factor a host made and
-- showed its user through the login's conversation, saved only if p_answer is its code within
-- the host's window (p_window, capped by settings.max_window) on the database's clock, and only
-- while p_user still has no factor, checked under the user's row lock: of two first
-- enrolments at once, from any hosts, the first to commit wins and the other adds nothing.
-- Write-only, as enroll: the secret goes in and never comes out; the proving step is used. A
-- first factor needs no proof (trust on first use) and records the proof for its role, as
-- enroll's does. Returns 'enrolled', 'wrong' (nothing saved and nothing counted: no stored
-- secret was guessed at, the host made this one and showed it to the user) or 'had-factor'
-- (nothing added). Raises for a record of this name bound to another account. p_secret and
-- p_answer NULL: the checks only, before the host shows anything ('may-enrol' or
-- 'had-factor'; nothing changed).
CREATE FUNCTION pam_totp_api.enroll_first(p_user text, p_uid bigint, p_label text, p_algorithm text, p_digits integer,
                                          p_period integer, p_secret bytea, p_answer text, p_window integer,
                                          p_credential text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  f pam_totp.factors%ROWTYPE;
  m record;
  win integer;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'enroll_first',
    ARRAY[p_user, p_uid::text, p_label, p_algorithm, p_digits::text, p_period::text, encode(p_secret, 'hex'), p_answer,
          p_window::text]), true);
  PERFORM pam_totp_api.require_exact_names(p_user);
  IF p_user IS NULL OR p_uid IS NULL OR p_label IS NULL OR p_algorithm IS NULL OR p_digits IS NULL OR p_period IS NULL
     OR (p_secret IS NULL) <> (p_answer IS NULL) THEN
    RAISE EXCEPTION 'enroll_first: bad arguments' USING ERRCODE = 'PT023';
  END IF;
  IF p_secret IS NULL THEN
    IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN RETURN 'had-factor'; END IF;
    PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, NULL);
    RETURN 'may-enrol';
  END IF;
  win := least(greatest(coalesce(p_window, 0), 0), (SELECT s.max_window FROM pam_totp.settings s));
  -- The new factor, in memory only until its code verified: check_factor's TOTP case, no step used yet.
  f.user_name := p_user; f.kind := 'totp'; f.label := p_label; f.algorithm := p_algorithm; f.digits := p_digits;
  f.period := p_period; f.secret := p_secret; f.last_step := -1; f.drift := 0;
  m := pam_totp_api.check_factor(f, p_answer, NULL, clock, win, 0, 0, false);
  IF m.step IS NULL THEN RETURN 'wrong'; END IF;
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM 1 FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN RETURN 'had-factor'; END IF;
  PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, p_secret);
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind)
  VALUES (p_user, p_label, p_algorithm, p_digits, p_period, clock, m.step, p_secret, 'totp');
  PERFORM pam_totp_api.audit_append('enroll', p_user, p_uid, p_label, NULL, 0,
                                    upper(p_algorithm) || ', ' || p_digits || ' digits, ' || p_period || ' s, at login');
  UPDATE pam_totp.users SET proof_role = pam_totp_api.me(),
                            proof_until = clock + (SELECT s.proof_seconds FROM pam_totp.settings s)
   WHERE name = p_user;
  RETURN 'enrolled';
END $$;

-- Replaces the user's recovery codes (hashed by the caller: PBKDF2-HMAC-SHA-256). With
-- p_codes (an import's plain codes), codes of the old set that were used stay used (an import
-- never revives one). Returns -1 if no set was there before, else the number left out.
CREATE FUNCTION pam_totp_api.replace_recovery(p_user text, p_uid bigint, p_set_id bigint, p_iterations integer,
                                              p_salt bytea, p_hashes bytea[], p_codes text[], p_credential text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
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
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'replace_recovery',
    ARRAY[p_user, p_uid::text, p_set_id::text, p_iterations::text, encode(p_salt, 'hex'), pam_totp_api.canonical(p_hashes),
          pam_totp_api.canonical(p_codes)]), true);
  PERFORM pam_totp_api.lock_for_change(p_user);
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user;
  IF NOT FOUND OR u.uid <> p_uid OR NOT EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user) THEN
    RAISE EXCEPTION 'no factor yet: enrol one first (totp-enroll), then make recovery codes' USING ERRCODE = 'PT010';
  END IF;
  SELECT * INTO old FROM pam_totp.recovery WHERE user_name = p_user;
  had := FOUND;
  IF had AND p_codes IS NOT NULL THEN
    FOR i IN 1 .. cardinality(p_codes) LOOP
      h := pam_totp_api.pbkdf2_sha256(convert_to(p_codes[i], 'UTF8'), old.salt, old.iterations);
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
  PERFORM pam_totp_api.audit_append('recovery-codes', p_user, p_uid, NULL, NULL, 0,
                                    cardinality(keep) || CASE WHEN p_codes IS NULL THEN ' new' ELSE ' imported' END
                                    || ' recovery codes' || CASE WHEN had THEN ', replacing the old set' ELSE '' END);
  RETURN CASE WHEN had THEN left_out ELSE -1 END;
END $$;

-- Removes one factor; returns how many are left. Only p_may_remove_last (root) removes the
-- last one, and with it the user.
CREATE FUNCTION pam_totp_api.remove_factor(p_user text, p_uid bigint, p_label text, p_may_remove_last boolean,
                                           p_credential text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE u pam_totp.users%ROWTYPE; n integer;
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'remove_factor',
    ARRAY[p_user, p_uid::text, p_label, p_may_remove_last::text]), true);
  PERFORM pam_totp_api.lock_for_change(p_user);
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user;
  IF NOT FOUND OR u.uid <> p_uid OR NOT EXISTS (SELECT 1 FROM pam_totp.factors WHERE user_name = p_user AND label = p_label) THEN
    RAISE EXCEPTION 'no factor with that label (see totp-enroll list)' USING ERRCODE = 'PT008';
  END IF;
  SELECT count(*) INTO n FROM pam_totp.factors WHERE user_name = p_user;
  IF n <= 1 AND NOT p_may_remove_last THEN
    RAISE EXCEPTION 'this is your last factor: enrol another one first (only root can remove a user''s last factor)' USING ERRCODE = 'PT009';
  END IF;
  DELETE FROM pam_totp.factors WHERE user_name = p_user AND label = p_label;
  IF n - 1 = 0 THEN DELETE FROM pam_totp.users WHERE name = p_user; END IF;
  PERFORM pam_totp_api.audit_append('remove', p_user, p_uid, p_label, NULL, 0, (n - 1) || ' factors left');
  RETURN n - 1;
END $$;

-- Admin: clears failures and lockout, and brings back any factor whose last used step lies
-- in the future (nothing but a wrong import could put it there; every code would read as
-- replayed): it becomes the current step. Returns what was cleared (no such user: raises).
CREATE FUNCTION pam_totp_api.unlock(p_user text) RETURNS TABLE (failures integer, locked_until bigint)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE u pam_totp.users%ROWTYPE; now_ bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  SELECT * INTO u FROM pam_totp.users WHERE name = p_user FOR UPDATE;
  IF NOT FOUND THEN RAISE EXCEPTION 'this user has no factor' USING ERRCODE = 'PT011'; END IF;
  UPDATE pam_totp.users SET failures = 0, locked_until = 0 WHERE name = p_user;
  UPDATE pam_totp.factors f SET last_step = now_ / f.period
   WHERE f.user_name = p_user AND f.kind = 'totp' AND f.last_step > now_ / f.period;
  PERFORM pam_totp_api.audit_append('unlock', p_user, u.uid, NULL, 0, 0,
                                    u.failures || ' failures cleared' || CASE WHEN u.locked_until > now_
                                    THEN ', a lockout until ' || pam_totp_api.utc_text(u.locked_until) || ' lifted' ELSE '' END);
  RETURN QUERY SELECT u.failures, u.locked_until;
END $$;

-- Admin: removes everything held for the user; false if there was nothing.
CREATE FUNCTION pam_totp_api.purge(p_user text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE gone pam_totp.users%ROWTYPE;
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  DELETE FROM pam_totp.enrolment_codes WHERE user_name = p_user;
  DELETE FROM pam_totp.users WHERE name = p_user RETURNING * INTO gone;
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM pam_totp_api.audit_append('purge', p_user, gone.uid, NULL, NULL, 0, 'every factor, recovery code and count removed');
  RETURN true;
END $$;

-- Admin: everyone's status (no secret).
CREATE FUNCTION pam_totp_api.all_status()
RETURNS TABLE (name text, uid bigint, factors bigint, failures integer, locked_until bigint)
LANGUAGE sql STABLE SECURITY DEFINER
AS $$
  SELECT u.name, u.uid, (SELECT count(*) FROM pam_totp.factors f WHERE f.user_name = u.name), u.failures, u.locked_until
    FROM pam_totp.users u ORDER BY u.name
$$;

-- Admin (import-files): a user's failure count, lockout and used recovery codes, and a
-- factor's last used step, as the file store had them. They only make things stricter, within
-- bounds: failures up to the hard cap, a lockout up to the longest one from now, a last step
-- no later than now. A host may not call them: a host changes a user's state only by logging
-- in (an import of a far-future step or lockout would have bricked the user).
CREATE FUNCTION pam_totp_api.import_state(p_user text, p_failures integer, p_locked_until bigint, p_recovery_used bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE cfg pam_totp.settings%ROWTYPE; now_ bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  SELECT * INTO cfg FROM pam_totp.settings;
  IF p_failures NOT BETWEEN 0 AND cfg.hard_failure_cap OR p_locked_until > now_ + cfg.max_lockout THEN
    RAISE EXCEPTION 'import: a failure count above % or a lockout beyond % s from now is not a file store''s', cfg.hard_failure_cap, cfg.max_lockout
      USING ERRCODE = 'PT027';
  END IF;
  UPDATE pam_totp.users SET failures = greatest(failures, p_failures), locked_until = greatest(locked_until, p_locked_until)
   WHERE name = p_user;
  UPDATE pam_totp.recovery SET used = used | p_recovery_used WHERE user_name = p_user;
  PERFORM pam_totp_api.audit_append('import', p_user, (SELECT u.uid FROM pam_totp.users u WHERE u.name = p_user), NULL,
                                    p_failures, p_locked_until, 'failure count, lockout and used recovery codes from a file store');
END $$;

-- p_drift: a TOTP factor's learned clock drift on the file host (UserState's, at most ±10
-- steps, the largest window; NULL: keep it), used as the database's from now on.
CREATE FUNCTION pam_totp_api.import_last_step(p_user text, p_label text, p_last_step bigint, p_drift integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE now_ bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  IF EXISTS (SELECT 1 FROM pam_totp.factors f WHERE f.user_name = p_user AND f.label = p_label AND p_last_step > now_ / f.period + 10) THEN
    RAISE EXCEPTION 'import: a last used step in the future is not a file store''s' USING ERRCODE = 'PT028';
  END IF;
  IF p_drift NOT BETWEEN -10 AND 10 THEN
    RAISE EXCEPTION 'import: a clock drift beyond 10 steps is not a file store''s' USING ERRCODE = 'PT029';
  END IF;
  UPDATE pam_totp.factors SET last_step = greatest(last_step, p_last_step),
                              drift = CASE WHEN kind = 'totp' THEN coalesce(p_drift, drift) ELSE drift END
   WHERE user_name = p_user AND label = p_label;
  PERFORM pam_totp_api.audit_append('import', p_user, (SELECT u.uid FROM pam_totp.users u WHERE u.name = p_user), p_label,
                                    NULL, 0, 'last used step ' || p_last_step
                                    || CASE WHEN coalesce(p_drift, 0) <> 0 THEN ', clock drift ' || pam_totp_api.signed(p_drift) || ' steps'
                                       ELSE '' END || ' from a file store');
END $$;

-- Admin (import-files): a phone or address from a file store, where it was proved by a code
-- sent to it at its enrolment; a host may not call it (a host's enrolment proves its own:
-- send_enrolment_code). The user row exists (a factor imported before it, or made here).
CREATE FUNCTION pam_totp_api.import_destination(p_user text, p_uid bigint, p_label text, p_kind text, p_destination text,
                                                p_created bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  PERFORM pam_totp_api.require_exact_names(p_user);
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, NULL);
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind, destination)
  VALUES (p_user, p_label, 'sha1', 6, 30, p_created, 0, NULL, p_kind, p_destination);
  PERFORM pam_totp_api.audit_append('import', p_user, p_uid, p_label, NULL, 0,
                                    CASE p_kind WHEN 'sms' THEN 'text messages to ' ELSE 'email to ' END
                                    || pam_totp_api.masked(p_kind, p_destination) || ' from a file store');
END $$;

-- Admin: the audit trail, oldest first: rows after p_after (an id; 0 from the start), of p_user
-- (NULL: everyone) at or after p_since, at most p_limit (1-1000) rows.
CREATE FUNCTION pam_totp_api.audit_trail(p_user text, p_since bigint, p_after bigint, p_limit integer)
RETURNS TABLE (id bigint, at bigint, role text, account text, uid bigint, event text, label text, failures integer,
               locked_until bigint, detail text)
LANGUAGE sql STABLE SECURITY DEFINER
AS $$
  SELECT a.id, a.at, a.role::text, a.account, a.uid, a.event, a.label, a.failures, a.locked_until, a.detail
    FROM pam_totp.audit a
   WHERE a.id > coalesce(p_after, 0) AND a.at >= coalesce(p_since, 0) AND (p_user IS NULL OR a.account = p_user)
   ORDER BY a.id LIMIT least(greatest(coalesce(p_limit, 100), 1), 1000)
$$;

-- Before the prompt, for a host: the uid p_user's enrolment is bound to (no row: not enrolled)
-- and each factor's kind, name and, for a phone or address, its mask (the hints a login
-- offers); has_recovery: the user has recovery codes; pending: a code sent to this factor is
-- live (a one-prompt stack then takes the answer's trailing digits as it). One row per factor.
CREATE FUNCTION pam_totp_api.enrolled(p_user text, p_credential text DEFAULT NULL)
RETURNS TABLE (uid bigint, kind text, label text, masked text, has_recovery boolean, pending boolean, digits integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'enrolled', ARRAY[p_user], true), true);
  -- digits: how many digits the factor's code has (a sent factor: its live code's, else NULL),
  -- so a one-field stack can hand the password on before the code is checked (code_after_password).
  RETURN QUERY SELECT u.uid, f.kind, f.label, pam_totp_api.masked(f.kind, f.destination),
         EXISTS (SELECT 1 FROM pam_totp.recovery r WHERE r.user_name = u.name),
         x.digits IS NOT NULL,
         CASE WHEN f.kind IN ('totp', 'hotp') THEN f.digits ELSE x.digits END
    FROM pam_totp.users u JOIN pam_totp.factors f ON f.user_name = u.name
    LEFT JOIN LATERAL (SELECT s.digits FROM pam_totp.sent_codes s WHERE s.user_name = u.name AND s.factor_id = f.id AND s.attempts_left > 0
                          AND s.expires_at > pam_totp_api.now_seconds() LIMIT 1) x ON true
   WHERE u.name = p_user ORDER BY f.id;
END $$;

-- A login's send (docs/FLEET.md, "Text-message and email codes"): a code to p_user's factor
-- p_label, within the account's limits and the fleet's (send_refusal), under the user's row
-- lock. The caller learns no code and no destination, only its mask. outcome: 'sent' (queued
-- now), 'pending' (a code sent at sent_at is still valid and oob_resend_interval has not
-- passed: nothing new is sent, the user is asked for that one), 'refused' (why, for the user,
-- in detail; nothing changed). p_host: the asking host's name, for the message's %h.
CREATE FUNCTION pam_totp_api.send_code(p_user text, p_uid bigint, p_label text, p_host text, p_credential text DEFAULT NULL,
                                       OUT outcome text, OUT detail text, OUT sent_at bigint, OUT expires_at bigint,
                                       OUT kind text, OUT masked text)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  u pam_totp.users%ROWTYPE;
  f pam_totp.factors%ROWTYPE;
  p pam_totp.sent_codes%ROWTYPE;
  q record;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'send_code',
    ARRAY[p_user, p_uid::text, p_label, p_host]), true);
  PERFORM pam_totp_api.require_exact_names(p_user);
  SELECT * INTO cfg FROM pam_totp.settings;
  SELECT * INTO u FROM pam_totp.users x WHERE x.name = p_user FOR UPDATE;
  IF FOUND AND u.uid = p_uid THEN
    SELECT * INTO f FROM pam_totp.factors x WHERE x.user_name = p_user AND x.label = p_label AND x.kind IN ('sms', 'email');
  END IF;
  IF f.id IS NULL THEN
    outcome := 'refused'; detail := 'no text-message or email factor of that name'; RETURN;
  END IF;
  kind := f.kind; masked := pam_totp_api.masked(f.kind, f.destination);
  IF u.failures >= cfg.hard_failure_cap OR clock < u.locked_until THEN
    outcome := 'refused'; detail := 'locked out: no code is sent'; RETURN;
  END IF;
  SELECT * INTO p FROM pam_totp.sent_codes x WHERE x.user_name = p_user;
  IF FOUND AND p.factor_id = f.id AND p.expires_at > clock AND p.attempts_left > 0 AND clock - p.sent_at < cfg.oob_resend_interval THEN
    outcome := 'pending'; sent_at := p.sent_at; expires_at := p.expires_at; RETURN;
  END IF;
  detail := pam_totp_api.send_refusal(p_user, clock, f.kind, f.destination);
  IF detail IS NOT NULL THEN outcome := 'refused'; RETURN; END IF;
  q := pam_totp_api.queue_code(p_user, f.kind, f.destination, p_host, clock);
  INSERT INTO pam_totp.sent_codes (user_name, id, factor_id, digits, salt, hash, sent_at, expires_at, attempts_left)
  VALUES (p_user, q.id, f.id, q.digits, q.salt, q.hash, clock, q.expires_at, cfg.oob_max_attempts)
  ON CONFLICT (user_name) DO UPDATE SET id = EXCLUDED.id, factor_id = EXCLUDED.factor_id, digits = EXCLUDED.digits,
    salt = EXCLUDED.salt, hash = EXCLUDED.hash, sent_at = EXCLUDED.sent_at, expires_at = EXCLUDED.expires_at,
    attempts_left = EXCLUDED.attempts_left;
  PERFORM pam_totp_api.audit_append('code-sent', p_user, u.uid, f.label, NULL, 0,
                                    f.kind || ' code to ' || masked || ' queued for ' || p_host);
  outcome := 'sent'; sent_at := clock; expires_at := q.expires_at;
END $$;

-- totp-enroll add-phone / add-email: the code that proves a new destination, sent before
-- anything is saved. The same checks as enroll (the proof of an enrolled user, a free name,
-- at most 32 factors, the same account) and the same limits as a login's send; a refusal
-- raises (nothing changed). Returns when it was sent (confirm_enrolment names it).
CREATE FUNCTION pam_totp_api.send_enrolment_code(p_user text, p_uid bigint, p_label text, p_kind text, p_destination text,
                                                 p_host text, p_credential text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  u pam_totp.users%ROWTYPE;
  q record;
  why text;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'send_enrolment_code',
    ARRAY[p_user, p_uid::text, p_label, p_kind, p_destination, p_host]), true);
  PERFORM pam_totp_api.require_exact_names(p_user);
  IF p_user IS NULL OR p_uid IS NULL OR p_label IS NULL OR octet_length(p_label) NOT BETWEEN 1 AND 64 OR p_destination IS NULL THEN
    RAISE EXCEPTION 'send_enrolment_code: a user, an account, a name of 1 to 64 bytes and a destination' USING ERRCODE = 'PT024';
  ELSIF p_kind IS NULL OR p_kind NOT IN ('sms', 'email') THEN
    RAISE EXCEPTION 'send_enrolment_code: a phone or an email address only' USING ERRCODE = 'PT025';
  END IF;
  -- The destination's rules are the domains' (migration 011), the same as the client's.
  BEGIN
    IF p_kind = 'sms' THEN PERFORM p_destination::pam_totp.phone_number; ELSE PERFORM p_destination::pam_totp.email_address; END IF;
  EXCEPTION WHEN check_violation THEN
    RAISE EXCEPTION '%', CASE p_kind
      WHEN 'sms' THEN 'a phone number must be + then 8 to 15 digits, the first not 0 (E.164, e.g. +15105551234)'
      ELSE 'an email address must look like name@example.com (a host name with a dot, no IP address)' END USING ERRCODE = CASE p_kind WHEN 'sms' THEN 'PT016' ELSE 'PT017' END;
  END;
  SELECT * INTO cfg FROM pam_totp.settings;
  INSERT INTO pam_totp.users (name, uid) VALUES (p_user, p_uid) ON CONFLICT (name) DO NOTHING;
  PERFORM pam_totp_api.lock_for_change(p_user);
  PERFORM pam_totp_api.enrollable(p_user, p_uid, p_label, NULL);
  -- Whether this destination is already the user's is said only once its code is typed back
  -- (confirm_enrolment_finish): said here, a host could test guesses at a masked number.
  SELECT * INTO u FROM pam_totp.users x WHERE x.name = p_user;
  IF u.failures >= cfg.hard_failure_cap OR clock < u.locked_until THEN
    RAISE EXCEPTION 'locked out: no code is sent' USING ERRCODE = 'PT014';
  END IF;
  why := pam_totp_api.send_refusal(p_user, clock, p_kind, p_destination);
  IF why IS NOT NULL THEN RAISE EXCEPTION '%', why USING ERRCODE = 'PT015'; END IF;
  q := pam_totp_api.queue_code(p_user, p_kind, p_destination, p_host, clock);
  INSERT INTO pam_totp.enrolment_codes (user_name, uid, id, label, kind, destination, digits, salt, hash, sent_at, expires_at, attempts_left)
  VALUES (p_user, p_uid, q.id, p_label, p_kind, p_destination, q.digits, q.salt, q.hash, clock, q.expires_at, cfg.oob_max_attempts)
  ON CONFLICT (user_name) DO UPDATE SET uid = EXCLUDED.uid, id = EXCLUDED.id, label = EXCLUDED.label, kind = EXCLUDED.kind,
    destination = EXCLUDED.destination, digits = EXCLUDED.digits, salt = EXCLUDED.salt, hash = EXCLUDED.hash,
    sent_at = EXCLUDED.sent_at, expires_at = EXCLUDED.expires_at, attempts_left = EXCLUDED.attempts_left;
  PERFORM pam_totp_api.audit_append('code-sent', p_user, p_uid, p_label, NULL, 0,
                                    p_kind || ' enrolment code to ' || pam_totp_api.masked(p_kind, p_destination) || ' queued for ' || p_host);
  RETURN clock;
END $$;

-- The code typed back at an enrolment (send_enrolment_code sent it at p_sent_at for p_label),
-- first step, as login_begin: under the user's row lock, counted whatever it is (one of the
-- code's attempts used, void after the last, and a failure toward the lockout) and recorded with
-- its hidden verdict; returns only the attempt's id, or NULL when no such code is outstanding
-- (expired, used up, replaced or never sent: nothing counted). Nothing a caller can read differs
-- between a right and a wrong code until confirm_enrolment_finish, which answers only once this
-- has committed: no rollback turns a wrong guess into an uncounted one.
CREATE FUNCTION pam_totp_api.confirm_enrolment_begin(p_user text, p_uid bigint, p_label text, p_sent_at bigint, p_code text,
                                                     p_created bigint, p_credential text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  e pam_totp.enrolment_codes%ROWTYPE;
  matched boolean;
  left_ integer;
  id_ bigint;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', pam_totp_api.identify(p_credential, 'confirm_enrolment_begin',
    ARRAY[p_user, p_uid::text, p_label, p_sent_at::text, p_code, p_created::text]), true);
  PERFORM pam_totp_api.require_exact_names(p_user);
  SELECT * INTO cfg FROM pam_totp.settings;
  PERFORM pam_totp_api.lock_for_change(p_user);
  SELECT * INTO e FROM pam_totp.enrolment_codes x WHERE x.user_name = p_user;
  IF NOT FOUND OR e.uid IS DISTINCT FROM p_uid OR e.label IS DISTINCT FROM p_label OR e.sent_at IS DISTINCT FROM p_sent_at
     OR e.expires_at <= clock OR e.attempts_left <= 0 OR p_created IS NULL THEN
    RETURN NULL;
  END IF;
  matched := coalesce(octet_length(p_code) = e.digits AND p_code ~ '^[0-9]+$'
                      AND pam_totp_crypto.digest(e.salt || convert_to(p_code, 'UTF8'), 'sha256') = e.hash, false);
  left_ := coalesce(pam_totp_api.use_attempt('enrolment', p_user), 0);
  UPDATE pam_totp.users u SET failures = u.failures + 1,
         locked_until = CASE WHEN cfg.min_lockout > 0 AND (u.failures + 1) % cfg.max_failures = 0 THEN clock + cfg.min_lockout
                             ELSE u.locked_until END
   WHERE u.name = p_user;
  INSERT INTO pam_totp.enrolment_attempts (role, xact, begun, user_name, uid, matched, label, kind, destination, created, attempts_left,
                                           nonce)
  VALUES (pam_totp_api.me(), pg_current_xact_id(), clock, p_user, p_uid, matched, e.label, e.kind, e.destination, p_created, left_,
          split_part(p_credential, ':', 4))
  RETURNING id INTO id_;
  RETURN id_;
END $$;

-- The second step: the verdict of an attempt whose begin has committed, told once, to the role
-- that began it. The right code saves the factor (unless the user has that destination already,
-- which is said only now) and takes back the failure its begin counted; outcome 'enrolled' or
-- 'wrong' (attempts_left more may be tried; 0: the code is void).
CREATE FUNCTION pam_totp_api.confirm_enrolment_finish(p_attempt bigint, p_credential text DEFAULT NULL,
                                                      OUT outcome text, OUT attempts_left integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE
  cfg pam_totp.settings%ROWTYPE;
  a pam_totp.enrolment_attempts%ROWTYPE;
  had boolean;
  fails integer;
  clock bigint := pam_totp_api.now_seconds();
BEGIN
  SELECT * INTO a FROM pam_totp.enrolment_attempts x WHERE x.id = p_attempt FOR UPDATE;
  PERFORM pam_totp_api.require_committed(FOUND AND pam_totp_api.finishing(a.role, a.nonce, p_credential, 'confirm_enrolment_finish'),
                                         a.xact, 'confirm_enrolment_finish', 'confirm_enrolment_begin');
  PERFORM set_config('pam_totp.caller', a.role, true);
  DELETE FROM pam_totp.enrolment_attempts x WHERE x.id = a.id OR x.begun < clock - 3600;
  SELECT * INTO cfg FROM pam_totp.settings;
  PERFORM 1 FROM pam_totp.users u WHERE u.name = a.user_name AND u.uid = a.uid FOR UPDATE;
  IF NOT a.matched OR NOT FOUND OR clock - a.begun > cfg.attempt_seconds THEN
    SELECT u.failures INTO fails FROM pam_totp.users u WHERE u.name = a.user_name;
    PERFORM pam_totp_api.audit_append('failure', a.user_name, a.uid, a.label, fails, 0, 'wrong enrolment code');
    outcome := 'wrong'; attempts_left := a.attempts_left; RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM pam_totp.factors x WHERE x.user_name = a.user_name AND x.kind = a.kind AND x.destination = a.destination) THEN
    RAISE EXCEPTION '%', CASE a.kind WHEN 'sms' THEN 'this phone number is already enrolled' ELSE 'this email address is already enrolled' END
      USING ERRCODE = CASE a.kind WHEN 'sms' THEN 'PT006' ELSE 'PT007' END;
  END IF;
  had := EXISTS (SELECT 1 FROM pam_totp.factors x WHERE x.user_name = a.user_name);
  PERFORM pam_totp_api.enrollable(a.user_name, a.uid, a.label, NULL);
  INSERT INTO pam_totp.factors (user_name, label, algorithm, digits, period, created, last_step, secret, kind, destination)
  VALUES (a.user_name, a.label, 'sha1', 6, 30, a.created, 0, NULL, a.kind, a.destination);
  DELETE FROM pam_totp.enrolment_codes x WHERE x.user_name = a.user_name;
  UPDATE pam_totp.users u SET failures = greatest(u.failures - 1, 0) WHERE u.name = a.user_name;
  PERFORM pam_totp_api.audit_append('enroll', a.user_name, a.uid, a.label, NULL, 0,
                                    CASE a.kind WHEN 'sms' THEN 'text messages to ' ELSE 'email to ' END
                                    || pam_totp_api.masked(a.kind, a.destination));
  IF NOT had THEN
    UPDATE pam_totp.users SET proof_role = a.role, proof_until = clock + cfg.proof_seconds WHERE name = a.user_name;
  END IF;
  outcome := 'enrolled'; attempts_left := 0;
END $$;

-- Both steps in one call, for pam-totpd (as the procedure login: it commits between them, so it
-- runs as its caller and names everything by schema). outcome 'expired': no such code.
CREATE PROCEDURE pam_totp_api.confirm_enrolment(p_user text, p_uid bigint, p_label text, p_sent_at bigint, p_code text,
                                                p_created bigint, INOUT outcome text DEFAULT NULL,
                                                INOUT attempts_left integer DEFAULT NULL, p_timeout_ms integer DEFAULT NULL,
                                                p_credential text DEFAULT NULL, p_finish_credential text DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE attempt pg_catalog.int8;
  deadline timestamptz := pg_catalog.statement_timestamp() + pg_catalog.make_interval(secs => coalesce(p_timeout_ms, 0) / 1000.0);
BEGIN
  -- The deadline as login's (above).
  IF p_timeout_ms IS NOT NULL THEN PERFORM pg_catalog.set_config('lock_timeout', p_timeout_ms::text, true); END IF;
  attempt := pam_totp_api.confirm_enrolment_begin(p_user, p_uid, p_label, p_sent_at, p_code, p_created, p_credential);
  IF attempt IS NULL THEN
    outcome := 'expired'; attempts_left := 0;
    RETURN;
  END IF;
  COMMIT;
  IF p_timeout_ms IS NOT NULL THEN
    IF pg_catalog.clock_timestamp() >= deadline THEN
      RAISE EXCEPTION 'canceling the enrolment: past its deadline' USING ERRCODE = '57014';
    END IF;
    PERFORM pg_catalog.set_config('lock_timeout',
      greatest(1, (pg_catalog.date_part('epoch', deadline - pg_catalog.clock_timestamp()) * 1000)::integer)::text, true);
  END IF;
  SELECT f.outcome, f.attempts_left INTO outcome, attempts_left FROM pam_totp_api.confirm_enrolment_finish(attempt, p_finish_credential) f;
  IF p_timeout_ms IS NOT NULL AND pg_catalog.clock_timestamp() >= deadline THEN
    RAISE EXCEPTION 'canceling the enrolment: past its deadline' USING ERRCODE = '57014';
  END IF;
END $$;

-- pam_totp_sender (pam-totpd deliver): the next message to send, claimed for good. The claim
-- commits before the deliverer runs its program and a claimed row is never handed out again,
-- so a message goes at most once (a deliverer killed mid-send does not send it again; the user
-- asks for another). Unclaimed messages past their code's life are dropped on the way. No row:
-- nothing waiting.
CREATE FUNCTION pam_totp_api.outbox_claim()
RETURNS TABLE (id bigint, kind text, destination text, code text, host text, minutes integer)
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  UPDATE pam_totp.outbox o SET code = NULL, done_at = clock, outcome = 'expired'
   WHERE o.claimed_at IS NULL AND o.outcome IS NULL AND o.expires_at <= clock;
  RETURN QUERY
    WITH c AS (SELECT o.id, o.code FROM pam_totp.outbox o WHERE o.claimed_at IS NULL AND o.outcome IS NULL
                ORDER BY o.id LIMIT 1 FOR UPDATE SKIP LOCKED)
    UPDATE pam_totp.outbox o SET claimed_at = clock, claimed_by = session_user, code = NULL
      FROM c WHERE o.id = c.id
    RETURNING o.id, o.kind, o.destination, c.code, o.host, o.minutes;
END $$;

-- pam_totp_sender: how the claimed message p_id went. A failed one voids its code (the user
-- asks for another; the send still counts, the program may have handed it on) and is written
-- to the audit trail with p_detail (the deliverer's own words, never the code or destination).
CREATE FUNCTION pam_totp_api.outbox_done(p_id bigint, p_sent boolean, p_detail text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
AS $$
DECLARE o pam_totp.outbox%ROWTYPE; clock bigint := pam_totp_api.now_seconds();
BEGIN
  PERFORM set_config('pam_totp.caller', session_user, true);  -- its audit rows are this role's (identify)
  UPDATE pam_totp.outbox x SET done_at = clock, outcome = CASE WHEN p_sent THEN 'sent' ELSE 'failed' END
   WHERE x.id = p_id AND x.claimed_by = session_user AND x.done_at IS NULL
  RETURNING x.* INTO o;
  IF NOT FOUND OR p_sent THEN RETURN; END IF;
  DELETE FROM pam_totp.sent_codes x WHERE x.id = p_id;
  DELETE FROM pam_totp.enrolment_codes x WHERE x.id = p_id;
  PERFORM pam_totp_api.audit_append('code-not-sent', o.user_name, (SELECT u.uid FROM pam_totp.users u WHERE u.name = o.user_name),
                                    NULL, NULL, 0,
                                    o.kind || ' code to ' || pam_totp_api.masked(o.kind, o.destination) || ' could not be sent: '
                                    || left(coalesce(p_detail, 'no reason given'), 200));
END $$;

-- Every function of this schema runs with search_path pinned, pg_temp last (a search_path
-- that does not name pg_temp searches it first for types and relations, and TEMP is PUBLIC's
-- by default), and standard_conforming_strings on (PL/pgSQL bodies compile with the caller's
-- settings). Set here, for all of them at once, in the transaction that creates them: none is
-- ever callable without. FleetSQLTests holds every function to it. Procedures are left out:
-- one that commits (login) may carry no SET, and so names everything by schema.
DO $$
DECLARE f pg_catalog.regprocedure;
BEGIN
  FOR f IN SELECT p.oid FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'pam_totp_api'::pg_catalog.regnamespace AND p.prokind = 'f' LOOP
    EXECUTE pg_catalog.format('ALTER FUNCTION %s SET search_path = pg_catalog, pam_totp, pg_temp SET standard_conforming_strings = on', f);
  END LOOP;
END $$;

-- Functions are executable by PUBLIC by default: none of these is.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pam_totp_api FROM PUBLIC;
REVOKE ALL ON ALL PROCEDURES IN SCHEMA pam_totp_api FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pam_totp_crypto FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
  pam_totp_api.login_begin(text, bigint, text, integer, integer, bigint, boolean, text, text),
  pam_totp_api.login_finish(bigint, text),
  pam_totp_api.enrolled_uid(text, text),
  pam_totp_api.user_status(text, text),
  pam_totp_api.list_factors(text, text),
  pam_totp_api.check_enrollable(text, bigint, text, bytea, text),
  pam_totp_api.enroll(text, bigint, text, text, integer, integer, bigint, bigint, bytea, text, text, text),
  pam_totp_api.enroll_first(text, bigint, text, text, integer, integer, bytea, text, integer, text),
  pam_totp_api.replace_recovery(text, bigint, bigint, integer, bytea, bytea[], text[], text),
  pam_totp_api.remove_factor(text, bigint, text, boolean, text),
  pam_totp_api.enrolled(text, text),
  pam_totp_api.send_code(text, bigint, text, text, text),
  pam_totp_api.send_enrolment_code(text, bigint, text, text, text, text, text),
  pam_totp_api.confirm_enrolment_begin(text, bigint, text, bigint, text, bigint, text),
  pam_totp_api.confirm_enrolment_finish(bigint, text)
TO pam_totp_host, pam_totp_admin;
GRANT EXECUTE ON PROCEDURE
  pam_totp_api.confirm_enrolment(text, bigint, text, bigint, text, bigint, text, integer, integer, text, text)
TO pam_totp_host, pam_totp_admin;
GRANT EXECUTE ON FUNCTION
  pam_totp_api.outbox_claim(),
  pam_totp_api.outbox_done(bigint, boolean, text)
TO pam_totp_sender;
GRANT EXECUTE ON PROCEDURE
  pam_totp_api.login(text, bigint, text, integer, integer, bigint, boolean, text, text, bigint, integer, integer, bigint, boolean, integer, text, integer, text, text)
TO pam_totp_host, pam_totp_admin;
GRANT EXECUTE ON FUNCTION
  pam_totp_api.unlock(text),
  pam_totp_api.purge(text),
  pam_totp_api.all_status(),
  pam_totp_api.import_state(text, integer, bigint, bigint),
  pam_totp_api.import_last_step(text, text, bigint, integer),
  pam_totp_api.import_destination(text, bigint, text, text, text, bigint),
  pam_totp_api.audit_trail(text, bigint, bigint, integer),
  pam_totp_api.add_host(text),
  pam_totp_api.remove_host(text)
TO pam_totp_admin;
