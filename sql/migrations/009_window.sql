-- pam_totp fleet schema, version 9: a fleet login's window is the host's (docs/FLEET.md, "The
-- window and clock drift"; docs/ARCHITECTURE.md, section 8).
--
-- settings.max_window is the cap on the adjacent_intervals a host asks for (a host asking for
-- more gets the cap; sql/api.sql, login_begin_at). Its default was 1, so every fleet host ran
-- with a window of ±1 whatever its adjacent_intervals said, where a host on files has ±5 by
-- default: now the default is 5, a host's default. A database still at the old default 1
-- moves to 5 (a 1 cannot be told from one a DBA chose: set it again after the upgrade,
-- `UPDATE pam_totp.settings SET max_window = 1`); any other value is kept.

ALTER TABLE pam_totp.settings ALTER COLUMN max_window SET DEFAULT 5;
UPDATE pam_totp.settings SET max_window = 5 WHERE max_window = 1;
