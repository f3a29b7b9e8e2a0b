-- 0003: deepcode-scheduler: automations (a cron schedule in a time zone that
-- submits a prompt to its own agentd thread) and their runs. Times are unix
-- milliseconds.
--
-- Exactly once: a scheduled occurrence is claimed by inserting its
-- (automation_id, scheduled_at) row in the same transaction that checks the
-- leadership lease's fence, and is submitted to agentd with a message id
-- derived from the occurrence, so agentd's retry contract turns any
-- resubmission (after a crash or a leader change) into the same turn.

CREATE TABLE automations (
    id                TEXT    NOT NULL PRIMARY KEY,
    name              TEXT    NOT NULL,
    cron              TEXT    NOT NULL,
    time_zone         TEXT    NOT NULL,
    workspace         TEXT    NOT NULL,
    profile           TEXT    NOT NULL,
    prompt            TEXT    NOT NULL,
    enabled           INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    missed_run_policy TEXT    NOT NULL DEFAULT 'skip' CHECK (missed_run_policy IN ('skip', 'runOnce')),
    -- The agentd thread every run of this automation is enqueued on.
    thread_id         TEXT    NOT NULL,
    -- The first occurrence no scheduler has handled yet; NULL when paused or
    -- when the expression never matches again.
    next_fire_at      INTEGER,
    -- JSON summary of the latest run.
    last_result       TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    -- Compare-and-set for automation/update; every change bumps it.
    revision          INTEGER NOT NULL DEFAULT 1 CHECK (revision > 0)
) STRICT;
CREATE INDEX automations_by_created ON automations (created_at, id);

CREATE TABLE automation_runs (
    id            TEXT    NOT NULL PRIMARY KEY,
    automation_id TEXT    NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    -- The occurrence (trigger 'schedule') or the time of the request ('manual').
    scheduled_at  INTEGER NOT NULL,
    trigger       TEXT    NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    -- automation/run's key and the fingerprint of what it asked for.
    request_id    TEXT,
    fingerprint   TEXT,
    -- What is sent to agentd, frozen at the claim so that a resubmission is
    -- the identical request: turn/enqueue {thread_id, message_id, prompt, profile}.
    message_id    TEXT    NOT NULL,
    thread_id     TEXT    NOT NULL,
    profile       TEXT    NOT NULL,
    prompt        TEXT    NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('claimed', 'submitted', 'skipped', 'failed')),
    turn_id       TEXT,
    -- JSON {code, message, retryable} when failed.
    error         TEXT,
    -- Occurrences this row stands for that were missed (downtime, drain,
    -- clock jump): 'skipped' rows, and the one run of the runOnce policy.
    missed_count  INTEGER NOT NULL DEFAULT 0,
    missed_from   INTEGER,
    -- The leadership fencing token a scheduled occurrence was claimed under.
    lease_token   INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    CHECK ((trigger = 'manual') = (request_id IS NOT NULL))
) STRICT;
CREATE UNIQUE INDEX automation_runs_occurrence ON automation_runs (automation_id, scheduled_at) WHERE trigger = 'schedule';
CREATE UNIQUE INDEX automation_runs_request ON automation_runs (automation_id, request_id) WHERE request_id IS NOT NULL;
-- A requestId names one request across all automations: reusing it for
-- another automation is DUPLICATE_MESSAGE_CONFLICT, as a messageId is.
CREATE UNIQUE INDEX automation_runs_request_id ON automation_runs (request_id) WHERE request_id IS NOT NULL;
CREATE INDEX automation_runs_history ON automation_runs (automation_id, scheduled_at DESC, id DESC);
CREATE INDEX automation_runs_claimed ON automation_runs (status) WHERE status = 'claimed';

-- Counters shared by scheduler processes. 'generation' grows with every
-- change to an automation, so the leader notices changes a standby made.
CREATE TABLE scheduler_state (
    name  TEXT    NOT NULL PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
INSERT INTO scheduler_state (name, value) VALUES ('generation', 0);
