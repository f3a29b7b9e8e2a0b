package agentd

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// activeTurns selects the turns in progress through turns_active, the
// partial index that holds only them. SQLite uses a partial index only for a
// query that repeats the index's condition (status = 'queued' alone does not
// imply it), and without statistics it prefers the (thread_id, ordinal)
// index for a thread's turns, which walks every turn the thread ever had:
// each turn/start and each scheduling pass then grew with the history. The
// turns in progress are few, however long the history.
const activeTurns = `turns INDEXED BY turns_active`

// activeStatus is turns_active's condition, word for word.
const activeStatus = `status IN ('queued', 'starting', 'running', 'waitingApproval')`

const threadColumns = `t.id, t.workspace, t.profile, t.title, t.kind, t.head_sequence, t.turn_count, t.created_at, t.updated_at,
	COALESCE((SELECT status FROM ` + activeTurns + ` WHERE thread_id = t.id AND ` + activeStatus + ` ORDER BY ordinal LIMIT 1), 'idle'),
	COALESCE((SELECT status FROM turns WHERE thread_id = t.id ORDER BY ordinal DESC LIMIT 1), ''), t.archived_at IS NOT NULL`

func scanThread(row interface{ Scan(...any) error }) (Thread, error) {
	var th Thread
	var created, updated int64
	err := row.Scan(&th.ID, &th.Workspace, &th.Profile, &th.Title, &th.Kind, &th.HeadSequence, &th.TurnCount, &created, &updated, &th.Status, &th.LastTurnStatus, &th.Archived)
	th.CreatedAt, th.UpdatedAt = fromMS(created), fromMS(updated)
	return th, err
}

func getThread(ctx context.Context, q querier, id string) (Thread, error) {
	if !validID("thr_", id) {
		return Thread{}, errs.New(errs.NotFound, "no thread %q", id)
	}
	th, err := scanThread(q.QueryRowContext(ctx, `SELECT `+threadColumns+` FROM threads t WHERE t.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Thread{}, errs.New(errs.NotFound, "no thread %q", id)
	}
	return th, dbErr(err)
}

// threadCursor pages threads by (updated_at, id), newest first.
type threadCursor struct {
	Updated int64  `json:"u"`
	ID      string `json:"i"`
}

func encodeCursor(c threadCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (threadCursor, error) {
	var c threadCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" {
		return c, errs.New(errs.InvalidParams, "cursor is not one this service returned")
	}
	return c, nil
}

func listThreads(ctx context.Context, q querier, kind, cursor string, limit int) ([]Thread, string, error) {
	return listThreadsIn(ctx, q, kind, cursor, limit, false)
}

// listThreadsIn lists the archived threads, or the others.
func listThreadsIn(ctx context.Context, q querier, kind, cursor string, limit int, archived bool) ([]Thread, string, error) {
	args := []any{}
	where := []string{"t.archived_at IS NULL"}
	if archived {
		where[0] = "t.archived_at IS NOT NULL"
	}
	if kind != "" {
		where = append(where, "t.kind = ?")
		args = append(args, kind)
	}
	if cursor != "" {
		c, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		where = append(where, "(t.updated_at < ? OR (t.updated_at = ? AND t.id < ?))")
		args = append(args, c.Updated, c.Updated, c.ID)
	}
	query := `SELECT ` + threadColumns + ` FROM threads t`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += ` ORDER BY t.updated_at DESC, t.id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []Thread
	for rows.Next() {
		th, err := scanThread(rows)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, th)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		next = encodeCursor(threadCursor{Updated: ms(last.UpdatedAt), ID: last.ID})
	}
	return out, next, nil
}

const turnColumns = `id, thread_id, ordinal, status, message_id, profile, COALESCE(model, ''), COALESCE(reasoning, ''),
	error_code, error_message, error_retryable, error_data, COALESCE(latest_response, ''), created_at, started_at, finished_at`

func scanTurn(row interface{ Scan(...any) error }) (Turn, error) {
	var t Turn
	var code, msg, data sql.NullString
	var retry sql.NullInt64
	var created int64
	var started, finished sql.NullInt64
	err := row.Scan(&t.ID, &t.ThreadID, &t.Ordinal, &t.Status, &t.MessageID, &t.Profile, &t.Model, &t.Reasoning,
		&code, &msg, &retry, &data, &t.Response, &created, &started, &finished)
	if err != nil {
		return t, err
	}
	t.CreatedAt = fromMS(created)
	if started.Valid {
		v := fromMS(started.Int64)
		t.StartedAt = &v
	}
	if finished.Valid {
		v := fromMS(finished.Int64)
		t.FinishedAt = &v
	}
	if code.Valid {
		t.Error = &TurnError{Code: errs.Code(code.String), Message: msg.String, Retryable: retry.Int64 == 1}
		if data.Valid {
			_ = json.Unmarshal([]byte(data.String), &t.Error.Data)
		}
	}
	return t, nil
}

func getTurn(ctx context.Context, q querier, threadID, turnID string) (Turn, error) {
	if !validID("turn_", turnID) {
		return Turn{}, errs.New(errs.NotFound, "no turn %q", turnID)
	}
	t, err := scanTurn(q.QueryRowContext(ctx, `SELECT `+turnColumns+` FROM turns WHERE id = ?`, turnID))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && threadID != "" && t.ThreadID != threadID) {
		return Turn{}, errs.New(errs.NotFound, "no turn %q in thread %q", turnID, threadID)
	}
	return t, dbErr(err)
}

func threadTurns(ctx context.Context, q querier, threadID string) ([]Turn, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+turnColumns+` FROM turns WHERE thread_id = ? ORDER BY ordinal`, threadID)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []Turn
	for rows.Next() {
		t, err := scanTurn(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, t)
	}
	return out, dbErr(rows.Err())
}

// latestTurn is the thread's newest turn.
func latestTurn(ctx context.Context, q querier, threadID string) (Turn, bool, error) {
	t, err := scanTurn(q.QueryRowContext(ctx, `SELECT `+turnColumns+` FROM turns WHERE thread_id = ? ORDER BY ordinal DESC LIMIT 1`, threadID))
	if errors.Is(err, sql.ErrNoRows) {
		return Turn{}, false, nil
	}
	return t, err == nil, dbErr(err)
}

const itemColumns = `id, thread_id, turn_id, kind, status, payload, created_at, updated_at`

func scanItem(row interface{ Scan(...any) error }) (Item, error) {
	var it Item
	var payload string
	var created, updated int64
	err := row.Scan(&it.ID, &it.ThreadID, &it.TurnID, &it.Kind, &it.Status, &payload, &created, &updated)
	it.Payload = json.RawMessage(payload)
	it.CreatedAt, it.UpdatedAt = fromMS(created), fromMS(updated)
	return it, err
}

func turnItems(ctx context.Context, q querier, turnID string) ([]Item, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+itemColumns+` FROM items WHERE turn_id = ? ORDER BY created_at, rowid`, turnID)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []Item
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, it)
	}
	return out, dbErr(rows.Err())
}

// inputReceipt is a user input found by its key, with what the retry
// contract compares.
type inputReceipt struct {
	Item           Item
	Submission     string
	Fingerprint    string
	DeliveryState  string
	ExpectedTurnID string
	Text           string
}

func receiptByKey(ctx context.Context, q querier, threadID, messageID string) (*inputReceipt, error) {
	var r inputReceipt
	var fp, ds, exp sql.NullString
	var payload string
	var created, updated int64
	err := q.QueryRowContext(ctx, `SELECT id, thread_id, turn_id, kind, status, payload, created_at, updated_at,
		fingerprint, delivery_state, expected_turn_id FROM items WHERE thread_id = ? AND message_id = ?`, threadID, messageID).
		Scan(&r.Item.ID, &r.Item.ThreadID, &r.Item.TurnID, &r.Item.Kind, &r.Item.Status, &payload, &created, &updated, &fp, &ds, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dbErr(err)
	}
	r.Item.Payload = json.RawMessage(payload)
	r.Item.CreatedAt, r.Item.UpdatedAt = fromMS(created), fromMS(updated)
	r.Fingerprint, r.DeliveryState, r.ExpectedTurnID = fp.String, ds.String, exp.String
	var up UserPayload
	_ = json.Unmarshal(r.Item.Payload, &up)
	r.Submission, r.Text = up.Submission, up.Text
	return &r, nil
}

const approvalColumns = `id, thread_id, turn_id, revision, status, kind, summary, details, COALESCE(decided_by, ''), created_at, decided_at`

func scanApproval(row interface{ Scan(...any) error }) (Approval, error) {
	var a Approval
	var details string
	var created int64
	var decided sql.NullInt64
	err := row.Scan(&a.ID, &a.ThreadID, &a.TurnID, &a.Revision, &a.Status, &a.Kind, &a.Summary, &details, &a.DecidedBy, &created, &decided)
	a.Details = json.RawMessage(details)
	a.CreatedAt = fromMS(created)
	if decided.Valid {
		v := fromMS(decided.Int64)
		a.DecidedAt = &v
	}
	return a, err
}

func getApproval(ctx context.Context, q querier, id string) (Approval, error) {
	if !validID("appr_", id) {
		return Approval{}, errs.New(errs.NotFound, "no approval %q", id)
	}
	a, err := scanApproval(q.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Approval{}, errs.New(errs.NotFound, "no approval %q", id)
	}
	return a, dbErr(err)
}

func pendingApprovals(ctx context.Context, q querier, threadID string) ([]Approval, error) {
	query := `SELECT ` + approvalColumns + ` FROM approvals WHERE status = 'pending'`
	var args []any
	if threadID != "" {
		query += ` AND thread_id = ?`
		args = append(args, threadID)
	}
	rows, err := q.QueryContext(ctx, query+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, a)
	}
	return out, dbErr(rows.Err())
}

// dbErr classifies storage errors; *errs.Error values pass through.
func dbErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	return errs.Wrap(err, errs.ServiceUnavailable, "the database is not available right now")
}
