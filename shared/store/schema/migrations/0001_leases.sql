-- 0001: cross-process leases with fencing tokens.
--
-- One row per lease name, kept forever: releasing a lease clears holder
-- ('') and expires_at (0) but keeps token, so the fencing token of a name
-- only ever grows. Times are unix milliseconds.
CREATE TABLE leases (
    name        TEXT    NOT NULL PRIMARY KEY,
    holder      TEXT    NOT NULL,
    token       INTEGER NOT NULL CHECK (token > 0),
    expires_at  INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL
) STRICT;
