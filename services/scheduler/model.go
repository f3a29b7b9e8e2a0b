package scheduler

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/ids"
	"strconv"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Run statuses.
const (
	StatusClaimed   = "claimed"
	StatusSubmitted = "submitted"
	StatusSkipped   = "skipped"
	StatusFailed    = "failed"
)

// Run triggers.
const (
	TriggerSchedule = "schedule"
	TriggerManual   = "manual"
)

// Missed-run policies.
const (
	PolicySkip    = "skip"
	PolicyRunOnce = "runOnce"
)

// Run is an automation run: its wire form and what a (re)submission
// sends, which is not on the wire.
type Run struct {
	api.AutomationRun

	profile, prompt, fingerprint string
	attempts                     int
	fresh                        bool // just claimed by this process: known to be claimed
}

// lastResult is the summary kept on the automation.
type lastResult struct {
	RunID       string     `json:"runId"`
	Trigger     string     `json:"trigger"`
	Status      string     `json:"status"`
	ScheduledAt time.Time  `json:"scheduledAt"`
	TurnID      string     `json:"turnId,omitempty"`
	Error       *errs.Wire `json:"error,omitempty"`
	Missed      *Missed    `json:"missed,omitempty"`
	At          time.Time  `json:"at"`
}

func summary(r *Run, at time.Time) string {
	b, _ := json.Marshal(lastResult{RunID: r.ID, Trigger: r.Trigger, Status: r.Status, ScheduledAt: r.ScheduledAt, TurnID: r.TurnID, Error: r.Error, Missed: r.Missed, At: at.UTC()})
	return string(b)
}

// newID makes an automation or run id (shared/ids: one scheme everywhere).
func newID(prefix string) string { return ids.New(prefix) }

func validID(prefix, id string) bool { return ids.Valid(prefix, id) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// occurrenceKey is the agentd messageId of a scheduled occurrence.
func occurrenceKey(automationID string, at time.Time) string {
	return "auto:" + automationID + ":" + strconv.FormatInt(at.UnixMilli(), 10)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

const automationColumns = `id, name, cron, time_zone, workspace, profile, prompt, enabled, missed_run_policy,
	thread_id, next_fire_at, last_result, created_at, updated_at, revision`

type scanner interface{ Scan(dest ...any) error }

func scanAutomation(r scanner) (*Automation, error) {
	var a Automation
	var enabled int
	var next sql.NullInt64
	var last sql.NullString
	var created, updated int64
	if err := r.Scan(&a.ID, &a.Name, &a.Cron, &a.TimeZone, &a.Workspace, &a.Profile, &a.Prompt, &enabled, &a.MissedRunPolicy,
		&a.ThreadID, &next, &last, &created, &updated, &a.Revision); err != nil {
		return nil, err
	}
	a.Enabled = enabled == 1
	if next.Valid {
		t := fromMs(next.Int64)
		a.NextFireAt = &t
	}
	if last.Valid && last.String != "" {
		a.LastResult = json.RawMessage(last.String)
	} else {
		a.LastResult = json.RawMessage("null")
	}
	a.CreatedAt, a.UpdatedAt = fromMs(created), fromMs(updated)
	return &a, nil
}

func getAutomation(ctx context.Context, q queryer, id string) (*Automation, error) {
	if !validID("auto_", id) {
		return nil, notFound(id)
	}
	a, err := scanAutomation(q.QueryRowContext(ctx, `SELECT `+automationColumns+` FROM automations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(id)
	}
	return a, err
}

func notFound(id string) error {
	return errs.New(errs.NotFound, "no automation %q", id).With("automationId", id)
}

const runColumns = `id, automation_id, scheduled_at, trigger, request_id, fingerprint, message_id, thread_id, profile, prompt,
	status, turn_id, error, missed_count, missed_from, created_at, updated_at`

func scanRun(r scanner) (*Run, error) {
	var x Run
	var req, fp, turn, errJSON sql.NullString
	var missedFrom sql.NullInt64
	var missedCount int
	var sched, created, updated int64
	if err := r.Scan(&x.ID, &x.AutomationID, &sched, &x.Trigger, &req, &fp, &x.MessageID, &x.ThreadID, &x.profile, &x.prompt,
		&x.Status, &turn, &errJSON, &missedCount, &missedFrom, &created, &updated); err != nil {
		return nil, err
	}
	x.ScheduledAt, x.CreatedAt, x.UpdatedAt = fromMs(sched), fromMs(created), fromMs(updated)
	x.RequestID, x.fingerprint, x.TurnID = req.String, fp.String, turn.String
	if errJSON.Valid && errJSON.String != "" {
		var w errs.Wire
		if json.Unmarshal([]byte(errJSON.String), &w) == nil {
			x.Error = &w
		}
	}
	if missedCount > 0 {
		x.Missed = &Missed{Count: missedCount, From: fromMs(missedFrom.Int64), Through: x.ScheduledAt}
	}
	return &x, nil
}

func getRun(ctx context.Context, q queryer, id string) (*Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, `SELECT `+runColumns+` FROM automation_runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errs.New(errs.NotFound, "no automation run %q", id)
	}
	return r, err
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const insertRunSQL = `INSERT INTO automation_runs (id, automation_id, scheduled_at, trigger, request_id, fingerprint,
	message_id, thread_id, profile, prompt, status, error, missed_count, missed_from, lease_token, created_at, updated_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`

func insertRunArgs(r *Run, leaseToken int64, now time.Time) []any {
	var missedCount int
	var missedFrom any
	if r.Missed != nil {
		missedCount, missedFrom = r.Missed.Count, ms(r.Missed.From)
	}
	var req, fp, token any
	if r.RequestID != "" {
		req, fp = r.RequestID, r.fingerprint
	}
	if leaseToken > 0 {
		token = leaseToken
	}
	var errJSON any
	if r.Error != nil {
		b, _ := json.Marshal(r.Error)
		errJSON = string(b)
	}
	return []any{r.ID, r.AutomationID, ms(r.ScheduledAt), r.Trigger, req, fp, r.MessageID, r.ThreadID, r.profile, r.prompt,
		r.Status, errJSON, missedCount, missedFrom, token, ms(now), ms(now)}
}

// insertRun inserts r unless its occurrence or request is already
// recorded; it reports whether it inserted.
func insertRun(ctx context.Context, tx execer, r *Run, leaseToken int64, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, insertRunSQL, insertRunArgs(r, leaseToken, now)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// bumpGeneration records that automations changed; it returns the new
// generation.
func bumpGeneration(ctx context.Context, tx *sql.Tx) (int64, error) {
	var g int64
	err := tx.QueryRowContext(ctx, `UPDATE scheduler_state SET value = value + 1 WHERE name = 'generation' RETURNING value`).Scan(&g)
	return g, err
}

// Cursors are opaque: base64url of "<unix ms>:<id>".
func encodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + ":" + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		at, id, ok := strings.Cut(string(b), ":")
		if n, err := strconv.ParseInt(at, 10, 64); ok && err == nil && id != "" {
			return n, id, nil
		}
	}
	return 0, "", errs.New(errs.InvalidParams, "invalid cursor: pass back nextCursor unchanged")
}

// queryAll runs q and scans every row with scan; the result is never nil
// (an empty page encodes as [], not null).
func queryAll[T any](ctx context.Context, db queryer, scan func(scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
