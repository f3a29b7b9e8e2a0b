package agentd_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// fixtureExtra is a second thread added to an upgrade fixture's copy (a
// schema ≥ 2 one): a failed turn with its error, a command, a token-usage
// note, a decided approval, and a turn a crash left running (recovery ends
// it interrupted before the backfill reaches the thread).
const fixtureExtra = "thr_fixturefixtureab"

func addFixtureExtra(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO threads (id, workspace, profile, title, kind, head_sequence, turn_count, created_at, updated_at)
			VALUES ('` + fixtureExtra + `', '/fixture/ws', 'script', 'second', 'thread', 0, 2, 1767225600000, 1767225600000)`,
		`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, model, error_code, error_message, error_retryable, error_data, created_at, started_at, finished_at)
			VALUES ('turn_fixturefixtureab', '` + fixtureExtra + `', 1, 'failed', 'enqueue', 'extra-1', 'script', 'm1', 'PROVIDER_FAILED', 'it broke', 1, '{"exit":2}', 1767225601000, 1767225601001, 1767225601009)`,
		`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, payload, created_at, updated_at)
			VALUES ('item_fixturefixtureba', '` + fixtureExtra + `', 'turn_fixturefixtureab', 'userMessage', 'completed', 'extra-1',
			'{"text":"run it","messageId":"extra-1","submission":"enqueue"}', 1767225601000, 1767225601000)`,
		`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at)
			VALUES ('item_fixturefixturebb', '` + fixtureExtra + `', 'turn_fixturefixtureab', 'commandExecution', 'failed', '{"command":"make","exitCode":2}', 1767225601002, 1767225601005)`,
		`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at)
			VALUES ('item_fixturefixturebc', '` + fixtureExtra + `', 'turn_fixturefixtureab', 'tokenUsage', 'completed', '{"input":10,"output":2}', 1767225601006, 1767225601006)`,
		`INSERT INTO approvals (id, thread_id, turn_id, status, kind, summary, details, decided_by, created_at, decided_at)
			VALUES ('appr_fixturefixtureaa', '` + fixtureExtra + `', 'turn_fixturefixtureab', 'approved', 'command', 'run make', '{"command":"make"}', 'cli', 1767225601003, 1767225601004)`,
		`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, created_at, started_at)
			VALUES ('turn_fixturefixtureac', '` + fixtureExtra + `', 2, 'running', 'enqueue', 'extra-2', 'script', 1767225602000, 1767225602001)`,
		`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, payload, created_at, updated_at)
			VALUES ('item_fixturefixturebd', '` + fixtureExtra + `', 'turn_fixturefixtureac', 'userMessage', 'completed', 'extra-2', 'v1:extra',
			'{"text":"and then","messageId":"extra-2","submission":"enqueue"}', 1767225602000, 1767225602000)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// projectionRows is what a database holds of its threads, turns, items,
// input receipts and approvals, one string per row, ids included (a
// rebuild keeps them). A steer's delivery state is left out: a rebuilt
// receipt reads unknown, as the seed says.
func projectionRows(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var out []string
	for _, q := range []string{
		`SELECT 'thread', id, workspace, profile, title, kind, turn_count FROM threads`,
		`SELECT 'turn', id, thread_id, ordinal, status, submission, message_id, profile, COALESCE(model, ''), COALESCE(error_code, ''),
			COALESCE(error_message, ''), COALESCE(error_retryable, -1), COALESCE(error_data, ''), COALESCE(latest_response, '') FROM turns`,
		`SELECT 'item', id, thread_id, turn_id, kind, status, COALESCE(message_id, ''), COALESCE(fingerprint, ''), COALESCE(expected_turn_id, ''),
			CASE kind WHEN 'userMessage' THEN json_extract(payload, '$.text') ELSE payload END FROM items`,
		`SELECT 'approval', id, thread_id, turn_id, status, kind, summary, details FROM approvals`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				parts = append(parts, fmt.Sprint(v))
			}
			out = append(out, strings.Join(parts, "|"))
		}
		rows.Close()
	}
	sort.Strings(out)
	return out
}

// waitBackfilled waits until agentd has written every backfill, and
// returns verify's answer then.
func waitBackfilled(t *testing.T, env *testkit.Env, database string) (api.StoreVerifyResult, int) {
	t.Helper()
	var res api.StoreVerifyResult
	var code int
	testkit.WaitFor(t, time.Minute, "the transcripts' backfill", func() bool {
		res, code = verify(t, env, database)
		return res.BackfillPending == 0
	})
	return res, code
}

// TestUpgradeBackfillsTranscripts: agentd, opening a database of each
// earlier schema, writes a transcript for each thread that has none, from
// the database, once: verify then finds no disagreement; the records are
// those a live thread gets, marked backfilled, with the keys and
// fingerprints the database holds; a restart writes nothing again; and a
// rebuild from the backfilled transcripts has the database's threads,
// turns, items, receipts and approvals.
func TestUpgradeBackfillsTranscripts(t *testing.T) {
	ms, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	bins := testkit.Binaries(t)
	for v := 1; v < len(ms); v++ {
		t.Run(fmt.Sprintf("schema-%d", v), func(t *testing.T) {
			src, err := os.ReadFile(fixturePath(v))
			if err != nil {
				t.Fatal(err)
			}
			env := testkit.NewEnv(t, bins)
			dbPath := filepath.Join(t.TempDir(), "old.sqlite3")
			if err := os.WriteFile(dbPath, src, 0o600); err != nil {
				t.Fatal(err)
			}
			threads := 0
			if v >= 2 {
				addFixtureExtra(t, dbPath)
				threads = 2
			}
			sessions := env.Layout(dbPath).SessionsDir()
			// What a crash in the middle of an earlier backfill leaves: a
			// temporary file, half written, which no reader takes for a
			// transcript and the next start removes.
			if err := os.MkdirAll(sessions, 0o700); err != nil {
				t.Fatal(err)
			}
			stale := filepath.Join(sessions, "."+fixtureThread+".jsonl.tmp-123")
			if err := os.WriteFile(stale, []byte(`{"v":1,"type":"thread.cre`), 0o600); err != nil {
				t.Fatal(err)
			}
			env.MustRun("--database", dbPath, "service", "start", "--port", "0")
			t.Cleanup(func() { env.Run("--database", dbPath, "service", "stop", "--drain=false") })
			res, code := waitBackfilled(t, env, dbPath)
			if code != 0 || len(res.Disagreements) != 0 || res.Threads != threads {
				t.Fatalf("verify after the backfill: exit %d, %d threads, %+v", code, res.Threads, res.Disagreements)
			}
			env.MustRun("--database", dbPath, "service", "stop")
			if _, err := os.Stat(stale); !os.IsNotExist(err) {
				t.Fatalf("the temporary file of an interrupted backfill is still there: %v", err)
			}
			if v < 2 {
				return
			}
			read := func(th string) ([]api.TranscriptRecord, []byte) {
				b, err := os.ReadFile(filepath.Join(sessions, th+".jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				var recs []api.TranscriptRecord
				for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
					var r api.TranscriptRecord
					if err := json.Unmarshal(line, &r); err != nil {
						t.Fatalf("%s: line %q: %v", th, line, err)
					}
					if !r.Backfill || r.V != api.TranscriptVersion || r.ThreadID != th || r.At.IsZero() {
						t.Fatalf("%s: a record not marked as backfilled: %s", th, line)
					}
					recs = append(recs, r)
				}
				return recs, b
			}
			first, firstBytes := read(fixtureThread)
			if got, want := recordTypes(first), []string{"thread.created", "turn.queued", "input", "turn.started", "input", "item", "turn.ended"}; !slices.Equal(got, want) {
				t.Fatalf("the fixture thread's records: %v, want %v", got, want)
			}
			if in := first[2].Input; in.MessageID != "fixture-key" || in.Fingerprint != "v1:fixture" || in.Submission != "start" || in.Text != "say hi" {
				t.Fatalf("the input record: %+v", in)
			}
			if in := first[4].Input; in.MessageID != "fixture-steer" || in.Fingerprint != "" || in.Submission != "steer" ||
				in.ExpectedTurnID != "turn_fixturefixtureaa" || in.DeliveryState != "unknown" {
				t.Fatalf("the steer record (a legacy one: no fingerprint made up): %+v", in)
			}
			second, secondBytes := read(fixtureExtra)
			if got, want := recordTypes(second), []string{"thread.created", "turn.queued", "input", "turn.started", "approval.requested", "approval.resolved",
				"item", "item", "turn.ended", "turn.queued", "input", "turn.started", "turn.ended"}; !slices.Equal(got, want) {
				t.Fatalf("the second thread's records: %v, want %v", got, want)
			}
			if e := second[8].Turn; e.Status != "failed" || e.Error == nil || e.Error.Code != "PROVIDER_FAILED" || !e.Error.Retryable {
				t.Fatalf("the failed turn's end: %+v", e)
			}
			if !second[7].Internal || second[6].Internal {
				t.Fatalf("internal marks: %+v %+v", second[6], second[7])
			}
			if e := second[12].Turn; e.Status != "interrupted" || e.Error == nil || e.Error.Code != "WORKER_CRASHED" {
				t.Fatalf("the recovered turn's end: %+v", e)
			}

			// Once: a restart writes nothing again.
			env.MustRun("--database", dbPath, "service", "start", "--port", "0")
			if res, code := waitBackfilled(t, env, dbPath); code != 0 {
				t.Fatalf("verify after a restart: exit %d %+v", code, res.Disagreements)
			}
			env.MustRun("--database", dbPath, "service", "stop")
			_, again := read(fixtureThread)
			_, again2 := read(fixtureExtra)
			if !bytes.Equal(again, firstBytes) || !bytes.Equal(again2, secondBytes) {
				t.Fatal("a restart changed a backfilled transcript")
			}

			rebuilt := filepath.Join(t.TempDir(), "rebuilt.sqlite3")
			var rb struct {
				Threads  int                     `json:"threads"`
				Findings []api.TranscriptFinding `json:"findings"`
			}
			env.MustRun("--database", rebuilt, "service", "rebuild", "--from", sessions, "--json").JSON(t, &rb)
			if rb.Threads != 2 || len(rb.Findings) != 0 {
				t.Fatalf("rebuild: %+v", rb)
			}
			have, got := projectionRows(t, dbPath), projectionRows(t, rebuilt)
			if !slices.Equal(have, got) {
				t.Fatalf("the rebuild from the backfilled transcripts differs:\ndatabase:\n%s\nrebuilt:\n%s", strings.Join(have, "\n"), strings.Join(got, "\n"))
			}
		})
	}
}
