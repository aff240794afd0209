-- Sends bounded whoever asks (docs/ARCHITECTURE.md, section 4, rule 19; docs/FLEET.md, "Limits
-- on sent codes"): a host role could have the deliverer text any number for any made-up user
-- name, each new name bringing its own hourly and daily allowance. Every send now also counts
-- against its destination (whatever the account) and against the host role that asked (so one
-- host cannot spend the fleet's per-minute budget), and text messages may be kept to a list of
-- country prefixes.

-- What a send is counted against: its destination (a SHA-256 of the kind and the destination,
-- the address in lower case) and the host role that asked. Rows from before have neither.
ALTER TABLE pam_totp.sends ADD COLUMN destination_key bytea, ADD COLUMN host name;
CREATE INDEX sends_destination ON pam_totp.sends (destination_key, at);
CREATE INDEX sends_host ON pam_totp.sends (host, at);

ALTER TABLE pam_totp.settings
  ADD COLUMN oob_destination_max_per_hour integer NOT NULL DEFAULT 5 CHECK (oob_destination_max_per_hour BETWEEN 1 AND 1000),
  ADD COLUMN oob_destination_max_per_day integer NOT NULL DEFAULT 20 CHECK (oob_destination_max_per_day BETWEEN 1 AND 10000),
  ADD COLUMN oob_host_max_per_minute integer NOT NULL DEFAULT 20 CHECK (oob_host_max_per_minute BETWEEN 1 AND 10000),
  ADD COLUMN oob_host_max_per_hour integer NOT NULL DEFAULT 300 CHECK (oob_host_max_per_hour BETWEEN 1 AND 100000),
  -- E.164 country prefixes ('+1', '+44', ...) text messages may go to; empty: any.
  ADD COLUMN oob_allowed_prefixes text[] NOT NULL DEFAULT '{}'
    CHECK (array_to_string(oob_allowed_prefixes, ',') ~ '^([+][1-9][0-9]{0,5}(,|$))*$' AND array_position(oob_allowed_prefixes, NULL) IS NULL);

-- A destination, written once: the same rules as MFAPolicy's Destination (validatePhone,
-- validateEmail), checked against each other by FleetSQLTests. A phone: E.164, + then 8 to 15
-- digits, the first not 0. An address: ASCII only, a dot-atom name of 1 to 64 bytes not starting
-- with - | or /, one @, a host name of two or more labels (letters, digits, inner hyphens, 1 to 63
-- each), the last not all digits (no IP addresses, no localhost), at most 254 bytes in all.
CREATE DOMAIN pam_totp.phone_number AS text
  CHECK (VALUE ~ '^[+][1-9][0-9]{7,14}$');
CREATE DOMAIN pam_totp.email_address AS text
  CHECK (octet_length(VALUE) <= 254
    AND VALUE ~ '^[A-Za-z0-9!#$%&''*+=?^_`{}~][A-Za-z0-9!#$%&''*+/=?^_`{|}~-]*([.][A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@'
    AND VALUE ~ '^[^@]{1,64}@'
    AND VALUE ~ '^[^@]+@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?[.])+[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$'
    AND VALUE !~ '[.][0-9]+$');

-- Existing rows must pass the stricter rule: one that does not (an address a host could queue
-- before) stops the migration with its row named, for an admin to remove (totp-enroll remove).
ALTER TABLE pam_totp.factors DROP CONSTRAINT factors_destination;
ALTER TABLE pam_totp.factors ADD CONSTRAINT factors_destination CHECK (coalesce(
  CASE kind
    WHEN 'sms' THEN secret IS NULL AND destination::pam_totp.phone_number IS NOT NULL
    WHEN 'email' THEN secret IS NULL AND destination::pam_totp.email_address IS NOT NULL
    ELSE secret IS NOT NULL AND destination IS NULL
  END, false));
