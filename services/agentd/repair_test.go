package agentd_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// dbRecordKeys are the identities of the transcript records the database
// holds for a thread: its creation; per turn its queueing, its start and
// its end once ended; each keyed input; each completed or failed item.
func dbRecordKeys(t *testing.T, dbPath, threadID string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys := []string{api.RecordThreadCreated}
	rows, err := db.Query(`SELECT id, status, started_at IS NOT NULL FROM turns WHERE thread_id = ?`, threadID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, status string
		var started bool
		if err := rows.Scan(&id, &status, &started); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, api.RecordTurnQueued+" "+id)
		if started {
			keys = append(keys, api.RecordTurnStarted+" "+id)
		}
		if status == "completed" || status == "failed" || status == "interrupted" {
			keys = append(keys, api.RecordTurnEnded+" "+id)
		}
	}
	rows.Close()
	rows, err = db.Query(`SELECT id, kind FROM items WHERE thread_id = ? AND ((kind = 'userMessage' AND message_id IS NOT NULL) OR
		(kind <> 'userMessage' AND status IN ('completed', 'failed')))`, threadID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, kind string
		if err := rows.Scan(&id, &kind); err != nil {
			t.Fatal(err)
		}
		if kind == "userMessage" {
			keys = append(keys, api.RecordInput+" "+id)
		} else {
			keys = append(keys, api.RecordItem+" "+id)
		}
	}
	rows.Close()
	return keys
}

// fileRecordKeys counts a transcript's records by identity, and returns
// them with the number of lines that are not whole records.
func fileRecordKeys(t *testing.T, b []byte) (map[string]int, []api.TranscriptRecord, int) {
	t.Helper()
	keys := map[string]int{}
	var recs []api.TranscriptRecord
	torn := 0
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var r api.TranscriptRecord
		if err := json.Unmarshal(line, &r); err != nil || r.Type == "" {
			torn++
			continue
		}
		recs = append(recs, r)
		var k string
		switch r.Type {
		case api.RecordThreadCreated:
			k = r.Type
		case api.RecordTurnQueued, api.RecordTurnStarted, api.RecordTurnEnded:
			k = r.Type + " " + r.TurnID
		case api.RecordInput:
			k = r.Type + " " + r.Input.ItemID
		case api.RecordItem:
			k = r.Type + " " + r.Item.ID
		default:
			continue
		}
		keys[k]++
	}
	return keys, recs, torn
}

// TestRepairTranscriptAfterExitBeforeAppend: agentd exits (the test hook,
// like a kill) right after a batch commits and before its records are
// appended, in a thread whose last line a power loss had also torn. The
// next agentd completes the transcript from the database in the
// background: the torn line ended and left as it is, every record of the
// database in the transcript exactly once, verify in agreement but for the
// torn line, an untouched thread's file unchanged; and a restart after the
// repair changes no byte.
func TestRepairTranscriptAfterExitBeforeAppend(t *testing.T) {
	env := startWith(t, testConfig+"\n[supervisor]\nrestart_min_interval = \"50ms\"\nrestart_max_interval = \"100ms\"\n")
	c := dial(t, env)
	hit, quiet := c.newThread("script").ID, c.newThread("script").ID
	c.waitEnded(hit, c.enqueue(hit, "say one").ID)
	c.waitEnded(quiet, c.enqueue(quiet, "say quiet").ID)
	c.close()
	env.MustRun("service", "stop")

	sessions := env.Layout("").SessionsDir()
	hitPath, quietPath := filepath.Join(sessions, hit+".jsonl"), filepath.Join(sessions, quiet+".jsonl")
	read := func(path string) []byte {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A power loss tore the last record (the turn's end) in half.
	b := read(hitPath)
	last := bytes.LastIndexByte(b[:len(b)-1], '\n') + 1
	torn := b[:last+(len(b)-last)/2]
	if err := os.WriteFile(hitPath, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	quietBytes := read(quietPath)

	// The second batch with transcript records after this start (the
	// first is the turn's admission, answered): agentd exits after its
	// commit, once.
	marker := filepath.Join(t.TempDir(), "exited")
	env.Extra = append(env.Extra, "DEEPCODE_TEST_EXIT_AFTER_COMMIT=2:"+marker)
	env.MustRun("service", "start", "--port", "0")
	c = dial(t, env)
	c.enqueue(hit, "say two\nsay three")
	testkit.WaitFor(t, time.Minute, "agentd to exit after a commit", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	c.close()
	// The supervisor starts agentd again on the next connection.
	sock := env.Layout("").Socket(paths.AgentdSocket)
	testkit.WaitFor(t, time.Minute, "agentd again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := tryDial(ctx, sock)
		if err == nil {
			p.Close(1000, "up")
		}
		return err == nil
	})
	res, _ := waitBackfilled(t, env, "")
	if len(res.Disagreements) != 1 || res.Disagreements[0].Kind != "tornLine" || res.Disagreements[0].ThreadID != hit {
		t.Fatalf("verify after the repair: %+v (want the torn line only)", res.Disagreements)
	}
	env.MustRun("service", "stop")

	check := func(th string, b []byte) []api.TranscriptRecord {
		t.Helper()
		have, recs, nTorn := fileRecordKeys(t, b)
		if !bytes.HasSuffix(b, []byte("\n")) {
			t.Fatalf("%s does not end with a whole line", th)
		}
		if th == hit && (nTorn != 1 || !bytes.HasPrefix(b, append(append([]byte{}, torn...), '\n'))) {
			t.Fatalf("%s: the torn line was not kept as it was, ended (%d torn lines)", th, nTorn)
		}
		want := dbRecordKeys(t, env.Layout("").Database, th)
		for _, k := range want {
			if have[k] != 1 {
				t.Errorf("%s: %q is in the transcript %d times", th, k, have[k])
			}
		}
		for k, n := range have {
			if n != 1 {
				t.Errorf("%s: %q is in the transcript %d times", th, k, n)
			}
		}
		return recs
	}
	hitBytes := read(hitPath)
	recs := check(hit, hitBytes)
	check(quiet, quietBytes)
	repaired := 0
	for _, r := range recs {
		if r.Backfill {
			repaired++
		}
	}
	// The torn turn end, and the exited batch's records at least.
	if repaired < 2 {
		t.Fatalf("%d records appended from the database; want the torn turn end and the exited batch's", repaired)
	}
	if !bytes.Equal(read(quietPath), quietBytes) {
		t.Fatal("the repair changed a transcript that lacked nothing")
	}

	// Idempotent: a restart after the repair changes no byte.
	env.MustRun("service", "start", "--port", "0")
	if res, _ := waitBackfilled(t, env, ""); len(res.Disagreements) != 1 {
		t.Fatalf("verify after a restart: %+v", res.Disagreements)
	}
	env.MustRun("service", "stop")
	if !bytes.Equal(read(hitPath), hitBytes) || !bytes.Equal(read(quietPath), quietBytes) {
		t.Fatal("a restart after the repair changed a transcript")
	}
	t.Logf("%d records appended from the database; %d records in the repaired transcript", repaired, len(recs))
}
