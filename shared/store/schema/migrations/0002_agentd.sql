-- 0002: agentd's durable model: workspaces and their trust, threads (a
-- logical agent is a thread with a profile), turns, items (user inputs are
-- the input receipts, keyed by (thread_id, message_id)), the per-thread
-- contiguous event log, and approvals. Times are unix milliseconds.

CREATE TABLE workspaces (
    path       TEXT    NOT NULL PRIMARY KEY,
    trusted    INTEGER NOT NULL DEFAULT 0 CHECK (trusted IN (0, 1)),
    trusted_at INTEGER,
    trusted_by TEXT
) STRICT;

CREATE TABLE threads (
    id                  TEXT    NOT NULL PRIMARY KEY,
    workspace           TEXT    NOT NULL REFERENCES workspaces (path),
    profile             TEXT    NOT NULL,
    title               TEXT    NOT NULL DEFAULT '',
    kind                TEXT    NOT NULL DEFAULT 'thread' CHECK (kind IN ('thread', 'agent')),
    provider_session_id TEXT,
    head_sequence       INTEGER NOT NULL DEFAULT 0,
    turn_count          INTEGER NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;
CREATE INDEX threads_by_update ON threads (updated_at DESC, id DESC);

CREATE TABLE turns (
    id                  TEXT    NOT NULL PRIMARY KEY,
    thread_id           TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    ordinal             INTEGER NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN
                            ('queued', 'starting', 'running', 'waitingApproval', 'completed', 'failed', 'interrupted')),
    submission          TEXT    NOT NULL CHECK (submission IN ('start', 'enqueue')),
    message_id          TEXT    NOT NULL,
    profile             TEXT    NOT NULL,
    model               TEXT,
    reasoning           TEXT,
    interactive         INTEGER NOT NULL DEFAULT 0,
    error_code          TEXT,
    error_message       TEXT,
    error_retryable     INTEGER,
    error_data          TEXT,
    provider_session_id TEXT,
    latest_response     TEXT,
    created_at          INTEGER NOT NULL,
    started_at          INTEGER,
    finished_at         INTEGER,
    UNIQUE (thread_id, ordinal)
) STRICT;
CREATE INDEX turns_active ON turns (status) WHERE status IN ('queued', 'starting', 'running', 'waitingApproval');

CREATE TABLE items (
    id               TEXT    NOT NULL PRIMARY KEY,
    thread_id        TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    turn_id          TEXT    NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    kind             TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('inProgress', 'completed', 'failed')),
    -- Input receipts: set on user inputs only.
    message_id       TEXT,
    fingerprint      TEXT,
    delivery_state   TEXT CHECK (delivery_state IN ('pending', 'accepted', 'unknown')),
    expected_turn_id TEXT,
    payload          TEXT    NOT NULL DEFAULT '{}',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX items_input_key ON items (thread_id, message_id) WHERE message_id IS NOT NULL;
CREATE INDEX items_by_turn ON items (turn_id, created_at);
CREATE INDEX items_pending_delivery ON items (delivery_state) WHERE delivery_state = 'pending';

CREATE TABLE events (
    thread_id TEXT    NOT NULL,
    sequence  INTEGER NOT NULL,
    type      TEXT    NOT NULL,
    at        INTEGER NOT NULL,
    payload   TEXT    NOT NULL,
    PRIMARY KEY (thread_id, sequence)
) STRICT, WITHOUT ROWID;

CREATE TABLE approvals (
    id         TEXT    NOT NULL PRIMARY KEY,
    thread_id  TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    turn_id    TEXT    NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    revision   INTEGER NOT NULL DEFAULT 1,
    status     TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'cancelled')),
    kind       TEXT    NOT NULL,
    summary    TEXT    NOT NULL,
    details    TEXT    NOT NULL DEFAULT '{}',
    decided_by TEXT,
    created_at INTEGER NOT NULL,
    decided_at INTEGER
) STRICT;
CREATE INDEX approvals_pending ON approvals (thread_id) WHERE status = 'pending';
