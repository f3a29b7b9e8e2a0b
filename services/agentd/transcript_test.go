package agentd_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// transcriptOf reads a thread's transcript records from the default
// instance's sessions folder.
func transcriptOf(t *testing.T, env *testkit.Env, threadID string) []api.TranscriptRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(env.Layout("").SessionsDir(), threadID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []api.TranscriptRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r api.TranscriptRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("transcript line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func recordTypes(recs []api.TranscriptRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Type)
	}
	return out
}

func verify(t *testing.T, env *testkit.Env, database string) (api.StoreVerifyResult, int) {
	t.Helper()
	args := []string{"service", "verify", "--json"}
	if database != "" {
		args = append([]string{"--database", database}, args...)
	}
	r := env.Run(args...)
	var res api.StoreVerifyResult
	r.JSON(t, &res)
	return res, r.Code
}

// TestTranscriptRecordsAndRoundTrips: a thread's transcript holds one
// record per input, item, approval and turn boundary, with keys,
// fingerprints and a steer written unknown; verify agrees; export and
// import round-trip with the keys kept.
func TestTranscriptRecordsAndRoundTrips(t *testing.T) {
	env := startConfigured(t)
	c := dial(t, env)
	th := c.newThread("script")
	t1 := c.submit("turn/start", th.ID, "k-1", "say hello\napprove run it\nwrite a.txt one\nawait-steer 60s\nsay bye").Turn
	a := c.waitEvent(th.ID, agentd.EventApprovalRequest)
	var ap struct {
		Approval agentd.Approval `json:"approval"`
	}
	decode(t, a.Payload, &ap)
	c.must("approval/respond", map[string]any{"approvalId": ap.Approval.ID, "revision": ap.Approval.Revision, "decision": "approve"}, nil)
	c.waitEventWhere(th.ID, agentd.EventItemCompleted, func(ev agentd.Event) bool { return strings.Contains(string(ev.Payload), "fileChange") })
	var sr agentd.TurnSteerResult
	c.must("turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": t1.ID, "messageId": "k-steer", "input": map[string]string{"text": "go left"}}, &sr)
	if sr.DeliveryState != agentd.DeliveryAccepted {
		t.Fatalf("steer: %+v", sr)
	}
	if done := c.waitEnded(th.ID, t1.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn: %+v", done.Turn)
	}
	c.submit("turn/start", th.ID, "k-2", "say again")
	c.waitEventWhere(th.ID, agentd.EventTurnCompleted, func(ev agentd.Event) bool { return !strings.Contains(string(ev.Payload), t1.ID) })
	c.must("thread/rename", map[string]any{"threadId": th.ID, "title": "renamed"}, nil)

	recs := transcriptOf(t, env, th.ID)
	types := recordTypes(recs)
	for _, want := range []string{api.RecordThreadCreated, api.RecordTurnQueued, api.RecordInput, api.RecordTurnStarted, api.RecordItem,
		api.RecordApprovalRequest, api.RecordApprovalResolved, api.RecordTurnEnded, api.RecordThreadUpdated} {
		if !slices.Contains(types, want) {
			t.Errorf("the transcript has no %s record: %v", want, types)
		}
	}
	var inputs []api.TranscriptInput
	for _, r := range recs {
		if r.V != api.TranscriptVersion || r.ThreadID != th.ID || r.At.IsZero() {
			t.Errorf("record without version, thread or time: %+v", r)
		}
		if r.Type == api.RecordInput {
			inputs = append(inputs, *r.Input)
		}
		if r.Type == api.RecordItem && r.Item.Kind == "userMessage" {
			t.Errorf("a user message is written as an item too: %+v", r)
		}
	}
	if len(inputs) != 3 || inputs[0].MessageID != "k-1" || !strings.HasPrefix(inputs[0].Fingerprint, "v1:") || inputs[0].Submission != "start" {
		t.Fatalf("inputs: %+v", inputs)
	}
	if s := inputs[1]; s.MessageID != "k-steer" || s.Submission != "steer" || s.ExpectedTurnID != t1.ID || s.DeliveryState != "unknown" || s.Text != "go left" {
		t.Fatalf("the steer's record: %+v (a transcript proves persistence: unknown)", s)
	}
	if res, code := verify(t, env, ""); code != 0 || len(res.Disagreements) != 0 || res.Records != len(recs) {
		t.Fatalf("verify: exit %d %+v (records %d)", code, res, len(recs))
	}

	// Export → import: a new thread with new ids, the keys and
	// fingerprints kept, its own transcript.
	exp := env.MustRun("threads", "export", th.ID)
	if n := strings.Count(exp.Stdout, "\n"); n != len(recs) {
		t.Fatalf("export wrote %d lines; the transcript has %d records", n, len(recs))
	}
	md := env.MustRun("threads", "export", th.ID, "--format", "markdown")
	if !strings.Contains(md.Stdout, "# renamed") && !strings.Contains(md.Stdout, "hello") {
		t.Fatalf("markdown export:\n%s", md.Stdout)
	}
	file := filepath.Join(t.TempDir(), "exp.jsonl")
	if err := os.WriteFile(file, []byte(exp.Stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	var imp api.ThreadResult
	env.MustRun("threads", "import", file, "--json").JSON(t, &imp)
	if imp.Thread.ID == th.ID || imp.Thread.Title != "renamed" || imp.Thread.TurnCount != 2 || imp.Thread.HeadSequence == 0 {
		t.Fatalf("imported thread: %+v", imp.Thread)
	}
	var rr api.TurnInputReadResult
	c.must("turn/input/read", api.TurnInputReadParams{ThreadID: imp.Thread.ID, MessageID: "k-1"}, &rr)
	if rr.Item == nil || rr.Item.ThreadID != imp.Thread.ID || rr.Item.TurnID == t1.ID {
		t.Fatalf("the imported receipt of k-1: %+v", rr.Item)
	}
	// The same request under the same key is a duplicate of the imported
	// turn; a different one is a conflict.
	dup := c.submit("turn/start", imp.Thread.ID, "k-1", "say hello\napprove run it\nwrite a.txt one\nawait-steer 60s\nsay bye")
	if !dup.Duplicate || dup.Turn.ID != rr.Item.TurnID {
		t.Fatalf("resend of an imported key: %+v", dup)
	}
	c.fail("turn/start", map[string]any{"threadId": imp.Thread.ID, "messageId": "k-1", "input": map[string]string{"text": "other"}}, errs.DuplicateMessageConflict)
	c.must("turn/input/read", api.TurnInputReadParams{ThreadID: imp.Thread.ID, MessageID: "k-steer"}, &rr)
	if rr.Item == nil || !strings.Contains(string(rr.Item.Payload), `"deliveryState":"unknown"`) {
		t.Fatalf("the imported steer receipt reads %+v; want unknown", rr.Item)
	}
	imported := transcriptOf(t, env, imp.Thread.ID)
	if len(imported) != len(recs) {
		t.Fatalf("the imported thread's transcript has %d records; the source %d", len(imported), len(recs))
	}
	if res, code := verify(t, env, ""); code != 0 || res.Threads != 2 {
		t.Fatalf("verify after import: exit %d %+v", code, res)
	}

	// Bad input.
	bad := env.Run("threads", "export", "nope")
	if bad.Code == 0 || !strings.Contains(bad.Stderr, "NOT_FOUND") {
		t.Fatalf("export of a bad id: %+v", bad)
	}
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte("not json\n"), 0o600)
	if r := env.Run("threads", "import", empty); r.Code == 0 || !strings.Contains(r.Stderr, "INVALID_PARAMS") {
		t.Fatalf("import of no records: %+v", r)
	}
	c.fail("thread/import", map[string]any{"records": []any{map[string]any{"v": 1, "type": "item", "threadId": "thr_x"}}}, errs.InvalidParams)
	c.fail("thread/import", map[string]any{"records": []any{}}, errs.InvalidParams)
	c.fail("thread/import", map[string]any{"records": []any{map[string]any{"v": 1, "type": "thread.created", "threadId": "thr_x", "thread": map[string]any{"workspace": t.TempDir(), "title": "t"}},
		map[string]any{"v": 1, "type": "input", "threadId": "thr_x", "turnId": "turn_y", "input": map[string]any{}}}, "workspace": t.TempDir(), "trust": true}, errs.InvalidParams)
}

// TestVerifyFindsDisagreementsAndTornLines: an edited projection row is
// reported; an item the transcript lacks is appended at the next start; a
// torn last line (what a crash in the middle of an append leaves) is
// skipped, reported, and the next record starts on a line of its own.
func TestVerifyFindsDisagreementsAndTornLines(t *testing.T) {
	env := startConfigured(t)
	c := dial(t, env)
	th := c.newThread("script")
	tr := c.start(th.ID, "say one\nsay two")
	c.waitEnded(th.ID, tr.ID)
	c.close()
	env.MustRun("service", "stop")

	db, err := sql.Open("sqlite3", "file:"+env.Layout("").Database)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE items SET payload = '{"text":"edited"}' WHERE kind = 'agentMessage' AND json_extract(payload, '$.text') = 'one'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES ('item_zzzzzzzzzzzzzzzz', ?, ?, 'commandExecution', 'completed', '{}', 0, 0)`, th.ID, tr.ID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	path := filepath.Join(env.Layout("").SessionsDir(), th.ID+".jsonl")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"v":1,"type":"item","at":"2026-`)
	f.Close()

	// The start (verify starts agentd) checks the transcript against the
	// database: it appends the command the transcript lacks, after ending
	// the torn line; the edited text stays a disagreement.
	res, code := waitBackfilled(t, env, "")
	kinds := map[string]int{}
	for _, d := range res.Disagreements {
		kinds[d.Kind]++
	}
	if code != 4 || kinds["textDiffers"] != 1 || kinds["missingInTranscript"] != 0 || kinds["tornLine"] != 1 || len(res.Disagreements) != 2 {
		t.Fatalf("verify: exit %d %+v", code, res.Disagreements)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "\"at\":\"2026-\n{") || !strings.Contains(string(b), `"id":"item_zzzzzzzzzzzzzzzz"`) {
		t.Fatalf("the repair did not end the torn line and append the missing command:\n%s", b)
	}
	// Text output and the export say so too.
	if r := env.Run("service", "verify"); r.Code != 4 || !strings.Contains(r.Stdout, "textDiffers") {
		t.Fatalf("verify (text): %+v", r)
	}
	exp := env.MustRun("threads", "export", th.ID)
	if !strings.Contains(exp.Stderr, "skipped 1 line") || strings.Contains(exp.Stdout, `"at":"2026-`+"\n") {
		t.Fatalf("export of a torn transcript: %+v", exp)
	}
	// The next append starts a new line; the torn one stays as it was.
	c = dial(t, env)
	tr2 := c.start(th.ID, "say three")
	c.waitEnded(th.ID, tr2.ID)
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "\"at\":\"2026-\n{") {
		t.Fatalf("the torn line was not ended before the next record:\n%s", b)
	}
	res, _ = verify(t, env, "")
	for _, d := range res.Disagreements {
		if d.TurnID == tr2.ID {
			t.Fatalf("the turn after the torn line disagrees: %+v", d)
		}
	}
	// Bad input.
	c.fail("store/verify", map[string]any{"threadId": "nope"}, errs.NotFound)
	c.fail("store/verify", map[string]any{"threadId": "thr_aaaaaaaaaaaaaaaa"}, errs.NotFound)
	c.fail("store/verify", map[string]any{"threadId": 7}, errs.InvalidParams)
}

// TestBackupRestoreRebuild: a backup taken while keyed turns keep being
// accepted is consistent (integrity ok, every key accepted before it began
// readable after a restore, the transcripts agreeing with it); a rebuild
// from the transcripts yields the same threads, items and receipts; a
// backup from a newer schema is refused.
func TestBackupRestoreRebuild(t *testing.T) {
	env := startConfigured(t)
	c := dial(t, env)
	var threads []string
	for range 3 {
		threads = append(threads, c.newThread("script").ID)
	}
	var mu sync.Mutex
	accepted := map[string]string{} // key → thread
	submit := func(i int) {
		th := threads[i%len(threads)]
		key := fmt.Sprintf("bk-%d", i)
		var r agentd.TurnSubmitResult
		if err := c.call("turn/enqueue", map[string]any{"threadId": th, "messageId": key, "input": map[string]string{"text": fmt.Sprintf("say n%d", i)}}, &r); err == nil {
			mu.Lock()
			accepted[key] = th
			mu.Unlock()
		}
	}
	for i := range 30 {
		submit(i)
	}
	before := map[string]string{}
	mu.Lock()
	for k, v := range accepted {
		before[k] = v
	}
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 30; ctx.Err() == nil && i < 400; i++ {
			submit(i)
		}
	}()
	backup := filepath.Join(t.TempDir(), "b.db")
	var res api.StoreBackupResult
	env.MustRun("service", "backup", "--to", backup, "--json").JSON(t, &res)
	cancel()
	wg.Wait()
	if res.Integrity != "ok" || res.Rows["threads"] != 3 || res.Transcripts != 3 || res.SchemaVersion == 0 {
		t.Fatalf("backup: %+v", res)
	}
	if r := env.Run("service", "backup", "--to", backup); r.Code == 0 || !strings.Contains(r.Stderr, "CONFLICT") {
		t.Fatalf("a backup over an existing file: %+v", r)
	}
	c.fail("store/backup", map[string]any{"path": "relative.db"}, errs.InvalidParams)
	c.fail("store/backup", map[string]any{"path": filepath.Join(t.TempDir(), "no", "such", "b.db")}, errs.InvalidParams)
	// Local methods are not served through the gateway.
	g := dialGateway(t, env)
	g.fail("store/backup", map[string]any{"path": filepath.Join(t.TempDir(), "g.db")}, errs.MethodNotFound)
	g.close()
	for _, th := range threads {
		c.waitIdle(th)
	}
	c.close()

	// Restore needs the service stopped.
	if r := env.Run("service", "restore", "--from", backup); r.Code == 0 || !strings.Contains(r.Stderr, "CONFLICT") {
		t.Fatalf("restore while running: %+v", r)
	}
	env.MustRun("service", "stop")
	var rr map[string]any
	env.MustRun("service", "restore", "--from", backup, "--json").JSON(t, &rr)
	if rr["previous"] == nil {
		t.Fatalf("restore: %+v", rr)
	}
	if _, err := os.Stat(env.Layout("").Database + ".bak"); err != nil {
		t.Fatal("the previous database is not kept as .bak:", err)
	}
	env.MustRun("service", "start", "--port", "0")
	c = dial(t, env)
	for key, th := range before {
		var r api.TurnInputReadResult
		c.must("turn/input/read", api.TurnInputReadParams{ThreadID: th, MessageID: key}, &r)
		if r.Item == nil {
			t.Fatalf("key %s, accepted before the backup, is not in the restored database", key)
		}
	}
	if v, code := verify(t, env, ""); code != 0 {
		t.Fatalf("verify after restore: exit %d %+v", code, v.Disagreements)
	}
	var list api.ThreadListResult
	c.must("thread/list", map[string]any{}, &list)

	// Rebuild from the (restored) transcripts into a new database.
	newDB := filepath.Join(t.TempDir(), "rebuilt.sqlite3")
	if r := env.Run("service", "rebuild"); r.Code == 0 || !strings.Contains(r.Stderr, "--database") {
		t.Fatalf("rebuild without --database: %+v", r)
	}
	var rb agentd.RebuildResult
	env.MustRun("--database", newDB, "service", "rebuild", "--from", env.Layout("").SessionsDir(), "--json").JSON(t, &rb)
	if rb.Threads != 3 || len(rb.Findings) != 0 || rb.Events == 0 {
		t.Fatalf("rebuild: %+v", rb)
	}
	if r := env.Run("--database", newDB, "service", "rebuild", "--from", env.Layout("").SessionsDir()); r.Code == 0 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("a rebuild over an existing database: %+v", r)
	}
	env.MustRun("--database", newDB, "service", "start", "--port", "0")
	t.Cleanup(func() { env.Run("--database", newDB, "service", "stop", "--drain=false") })
	n := dialSocket(t, env.Layout(newDB).Socket("agentd.sock"), "/rpc")
	var list2 api.ThreadListResult
	n.must("thread/list", map[string]any{}, &list2)
	if len(list2.Threads) != len(list.Threads) {
		t.Fatalf("rebuilt threads: %d, restored %d", len(list2.Threads), len(list.Threads))
	}
	for _, th := range list.Threads {
		a, b := readAllItems(t, c, th.ID), readAllItems(t, n, th.ID)
		if !slices.Equal(a, b) {
			t.Fatalf("thread %s: items differ after the rebuild:\n%v\n%v", th.ID, a, b)
		}
	}
	for key, th := range before {
		var r api.TurnInputReadResult
		n.must("turn/input/read", api.TurnInputReadParams{ThreadID: th, MessageID: key}, &r)
		if r.Item == nil {
			t.Fatalf("key %s is not in the rebuilt database", key)
		}
	}
	if v, code := verify(t, env, newDB); code != 0 {
		t.Fatalf("verify of the rebuilt database: exit %d %+v", code, v.Disagreements)
	}
	// The rebuilt workspace is not trusted: trust is never restored.
	n.fail("turn/start", map[string]any{"threadId": list.Threads[0].ID, "messageId": "after-rebuild", "input": map[string]string{"text": "say x"}}, errs.WorkspaceUntrusted)

	// A backup from a newer schema is refused.
	newer := filepath.Join(t.TempDir(), "newer.db")
	b, _ := os.ReadFile(backup)
	os.WriteFile(newer, b, 0o600)
	db, _ := sql.Open("sqlite3", "file:"+newer)
	if _, err := db.Exec(`PRAGMA user_version = 999`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	env.Run("service", "stop")
	if r := env.Run("service", "restore", "--from", newer); r.Code == 0 || !strings.Contains(r.Stderr, "SCHEMA_TOO_NEW") {
		t.Fatalf("restore of a newer schema: %+v", r)
	}
	if r := env.Run("service", "restore", "--from", filepath.Join(t.TempDir(), "missing.db")); r.Code == 0 || !strings.Contains(r.Stderr, "NOT_FOUND") {
		t.Fatalf("restore of a missing file: %+v", r)
	}
}

// readAllItems is each of a thread's items as kind:text, in turn order.
func readAllItems(t *testing.T, c *conn, threadID string) []string {
	t.Helper()
	var out []string
	for _, tr := range c.readThread(threadID).Turns {
		for _, it := range c.readTurn(threadID, tr.ID).Items {
			var p struct {
				Text      string `json:"text"`
				MessageID string `json:"messageId"`
			}
			json.Unmarshal(it.Payload, &p)
			out = append(out, it.ID+":"+it.Kind+":"+p.Text+":"+p.MessageID)
		}
	}
	return out
}

// waitIdle waits until a thread has no active turn.
func (c *conn) waitIdle(threadID string) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		active := false
		for _, tr := range c.readThread(threadID).Turns {
			switch tr.Status {
			case agentd.StatusCompleted, agentd.StatusFailed, agentd.StatusInterrupted:
			default:
				active = true
			}
		}
		if !active {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("thread %s still has active turns", threadID)
}
