-- 0004: the deepcode provider's item blobs: what an item keeps whole beside
-- its payload (a shell call's whole output, a changed file before and after
-- the change), read on demand. Times are unix milliseconds.
CREATE TABLE item_blobs (
    item_id    TEXT    NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    data       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (item_id, name)
) STRICT;
