-- 0005: threads can be archived (hidden from thread/list and thread/search
-- until brought back; nothing is deleted). Unix milliseconds, NULL when the
-- thread is not archived.
ALTER TABLE threads ADD COLUMN archived_at INTEGER;
CREATE INDEX threads_archived ON threads (archived_at) WHERE archived_at IS NOT NULL;
