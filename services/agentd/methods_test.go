package agentd_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestMethods covers every business method of agentd with good and bad
// input. Its subtests run in order: thread/list pages over every thread of
// the instance.
func TestMethods(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)

	t.Run("initialize", func(t *testing.T) {
		c := dial(t, env)
		var res api.InitializeResult
		c.must("initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "t", Version: "0"}}, &res)
		rr := res.Capabilities.RequestRetry
		for m, want := range map[string]string{
			"turn/start": api.RetryKeyed, "turn/enqueue": api.RetryKeyed, "turn/steer": api.RetryKeyed,
			"thread/read": api.RetrySafe, "turn/input/read": api.RetrySafe, "event/replay": api.RetrySafe, "agent/show": api.RetrySafe,
		} {
			if rr[m] != want {
				t.Errorf("requestRetry[%s] = %q, want %q", m, rr[m], want)
			}
		}
		// Never is the default: nothing is inferred from a name.
		for _, m := range []string{"thread/start", "turn/interrupt", "approval/respond", "agent/run", "agent/continue"} {
			if v, ok := rr[m]; ok && v != api.RetryNever {
				t.Errorf("requestRetry[%s] = %q, want never or absent", m, v)
			}
		}
		c.fail("initialize", api.InitializeParams{ProtocolVersion: "0.9"}, errs.ProtocolMismatch)
	})

	t.Run("thread/workspace", func(t *testing.T) {
		c := dial(t, env)
		ws := t.TempDir()
		real, err := filepath.EvalSymlinks(ws)
		if err != nil {
			t.Fatal(err)
		}
		var r threadResult
		c.must("thread/start", map[string]any{"workspace": ws, "trust": true}, &r)
		var got api.ThreadWorkspaceResult
		c.must("thread/workspace", api.ThreadWorkspaceParams{ThreadID: r.Thread.ID}, &got)
		if got.ThreadID != r.Thread.ID || got.Workspace != real || !got.Trusted {
			t.Fatalf("thread/workspace: %+v", got)
		}
		c.fail("thread/workspace", map[string]any{"threadId": "thr_aaaaaaaaaaaaaaaa"}, errs.NotFound)
		c.fail("thread/workspace", map[string]any{"threadId": "nope"}, errs.NotFound)
		c.fail("thread/workspace", map[string]any{"threadId": 7}, errs.InvalidParams)
		c.fail("thread/workspace", map[string]any{"threadId": r.Thread.ID, "extra": true}, errs.InvalidParams)
		c.fail("thread/workspace", []any{r.Thread.ID}, errs.InvalidParams)
	})

	t.Run("thread/start", func(t *testing.T) {
		c := dial(t, env)
		ws := t.TempDir()
		real, err := filepath.EvalSymlinks(ws)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(ws, "file.txt")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.fail("thread/start", map[string]any{"workspace": "relative/dir", "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": "", "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": file, "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": filepath.Join(ws, "missing"), "trust": true}, errs.NotFound)
		c.fail("thread/start", map[string]any{"workspace": ws, "profile": "nope", "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": ws, "profile": "Script", "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": ws, "title": strings.Repeat("x", 257), "trust": true}, errs.InvalidParams)
		c.fail("thread/start", map[string]any{"workspace": ws, "trust": "yes"}, errs.InvalidParams)

		// Untrusted: refused, and nothing is recorded.
		e := c.fail("thread/start", map[string]any{"workspace": ws}, errs.WorkspaceUntrusted)
		if !strings.Contains(e.Message, "--trust") {
			t.Errorf("the untrusted message does not say how to grant trust: %q", e.Message)
		}
		c.fail("thread/start", map[string]any{"workspace": ws, "trust": false}, errs.WorkspaceUntrusted)

		// trust: true records the grant; the title may be 256 bytes.
		title := strings.Repeat("é", 128)
		var r threadResult
		c.must("thread/start", map[string]any{"workspace": ws, "trust": true, "title": title}, &r)
		th := r.Thread
		if !validShape("thr_", th.ID) || th.Workspace != real || th.Profile != "shell" || th.Kind != "thread" ||
			th.Status != "idle" || th.TurnCount != 0 || th.HeadSequence != 0 || th.Title != title || th.CreatedAt.IsZero() {
			t.Fatalf("thread/start: %+v", th)
		}
		// Later threads in the workspace need no trust, also through a
		// symlink or an unclean path.
		c.must("thread/start", map[string]any{"workspace": ws, "profile": "script"}, &r)
		if r.Thread.Profile != "script" || r.Thread.Workspace != real {
			t.Fatalf("second thread: %+v", r.Thread)
		}
		link := filepath.Join(t.TempDir(), "link")
		if err := os.Symlink(ws, link); err != nil {
			t.Fatal(err)
		}
		c.must("thread/start", map[string]any{"workspace": link}, &r)
		if r.Thread.Workspace != real {
			t.Fatalf("through a symlink: workspace %q, want %q", r.Thread.Workspace, real)
		}
		sub := filepath.Join(ws, "sub")
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		c.must("thread/start", map[string]any{"workspace": sub + "/.."}, &r)
		if r.Thread.Workspace != real {
			t.Fatalf("unclean path: workspace %q, want %q", r.Thread.Workspace, real)
		}
		// Trust is per folder: a subfolder is its own workspace.
		c.fail("thread/start", map[string]any{"workspace": sub}, errs.WorkspaceUntrusted)
		// The read shows what start returned.
		got := c.readThread(th.ID)
		if got.Thread.ID != th.ID || got.Thread.Title != title || got.Turns == nil || len(got.Turns) != 0 {
			t.Fatalf("thread/read: %+v", got)
		}
	})

	t.Run("thread/list", func(t *testing.T) {
		c := dial(t, env)
		ws := t.TempDir()
		mine := map[string]bool{}
		for range 7 {
			mine[c.newThreadIn(ws, "script").ID] = true
		}
		var all struct {
			Threads    []agentd.Thread `json:"threads"`
			NextCursor string          `json:"nextCursor"`
		}
		c.must("thread/list", map[string]any{"limit": 200}, &all)
		if all.NextCursor != "" || len(all.Threads) < 7 {
			t.Fatalf("limit 200: %d threads, cursor %q", len(all.Threads), all.NextCursor)
		}
		total := len(all.Threads)

		seen := map[string]int{}
		cursor := ""
		pages := 0
		var prev *agentd.Thread
		for {
			p := map[string]any{"limit": 3}
			if cursor != "" {
				p["cursor"] = cursor
			}
			var page struct {
				Threads    []agentd.Thread `json:"threads"`
				NextCursor string          `json:"nextCursor"`
			}
			c.must("thread/list", p, &page)
			pages++
			if len(page.Threads) > 3 || (page.NextCursor != "" && len(page.Threads) != 3) {
				t.Fatalf("page %d: %d threads, cursor %q", pages, len(page.Threads), page.NextCursor)
			}
			for i := range page.Threads {
				th := page.Threads[i]
				seen[th.ID]++
				if prev != nil && (th.UpdatedAt.After(prev.UpdatedAt) || th.UpdatedAt.Equal(prev.UpdatedAt) && th.ID > prev.ID) {
					t.Fatalf("not newest first: %s (%s) after %s (%s)", th.ID, th.UpdatedAt, prev.ID, prev.UpdatedAt)
				}
				prev = &th
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if len(seen) != total || pages != (total+2)/3 {
			t.Fatalf("paging saw %d threads in %d pages; there are %d", len(seen), pages, total)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("thread %s listed %d times", id, n)
			}
		}
		for id := range mine {
			if seen[id] != 1 {
				t.Fatalf("thread %s not listed", id)
			}
		}
		// The default page is 50.
		var def struct {
			Threads []agentd.Thread `json:"threads"`
		}
		c.must("thread/list", map[string]any{}, &def)
		if len(def.Threads) != min(total, 50) {
			t.Fatalf("default page: %d threads of %d", len(def.Threads), total)
		}
		c.fail("thread/list", map[string]any{"cursor": "!!not base64!!"}, errs.InvalidParams)
		c.fail("thread/list", map[string]any{"cursor": base64.RawURLEncoding.EncodeToString([]byte(`{}`))}, errs.InvalidParams)
		c.fail("thread/list", map[string]any{"cursor": base64.RawURLEncoding.EncodeToString([]byte(`[1]`))}, errs.InvalidParams)
		c.fail("thread/list", map[string]any{"limit": -1}, errs.InvalidParams)
		c.fail("thread/list", map[string]any{"limit": 201}, errs.InvalidParams)
		c.fail("thread/list", map[string]any{"limit": "3"}, errs.InvalidParams)
	})

	t.Run("reads", func(t *testing.T) {
		c := dial(t, env)
		th := c.newThread("script")
		other := c.newThread("script")
		var in map[string]json.RawMessage
		c.must("turn/input/read", map[string]string{"threadId": th.ID, "messageId": "m-read"}, &in)
		if string(in["item"]) != "null" {
			t.Fatalf("turn/input/read before the submission: %s", in["item"])
		}
		sub := c.submit("turn/start", th.ID, "m-read", "say hi")
		done := c.waitEnded(th.ID, sub.Turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "hi" || done.Turn.MessageID != "m-read" ||
			done.Turn.Ordinal != 1 || done.Turn.StartedAt == nil || done.Turn.FinishedAt == nil || done.Turn.Error != nil {
			t.Fatalf("turn/read: %+v", done.Turn)
		}
		if len(done.Items) != 2 || done.Items[0].Kind != agentd.KindUserMessage || done.Items[0].ID != sub.Item.ID ||
			done.Items[1].Kind != agentd.KindAgentMessage {
			t.Fatalf("turn/read items: %+v", done.Items)
		}
		var receipt struct{ Item agentd.Item }
		c.must("turn/input/read", map[string]string{"threadId": th.ID, "messageId": "m-read"}, &receipt)
		var up agentd.UserPayload
		decode(t, receipt.Item.Payload, &up)
		if receipt.Item.ID != sub.Item.ID || receipt.Item.TurnID != sub.Turn.ID || up.Text != "say hi" || up.MessageID != "m-read" || up.Submission != "start" {
			t.Fatalf("turn/input/read: %+v %+v", receipt.Item, up)
		}
		// A receipt belongs to its thread.
		c.must("turn/input/read", map[string]string{"threadId": other.ID, "messageId": "m-read"}, &in)
		if string(in["item"]) != "null" {
			t.Fatalf("another thread's receipt: %s", in["item"])
		}
		c.fail("turn/input/read", map[string]string{"threadId": unknownID("thr_"), "messageId": "m-read"}, errs.NotFound)
		c.fail("turn/input/read", map[string]string{"threadId": th.ID, "messageId": ""}, errs.InvalidParams)
		c.fail("turn/input/read", map[string]string{"threadId": th.ID, "messageId": strings.Repeat("m", 129)}, errs.InvalidParams)
		c.fail("turn/input/read", map[string]string{"threadId": th.ID, "messageId": "a\nb"}, errs.InvalidParams)

		tr := c.readThread(th.ID)
		if tr.Thread.TurnCount != 1 || len(tr.Turns) != 1 || tr.Turns[0].ID != sub.Turn.ID || tr.Thread.Status != "idle" ||
			tr.Thread.HeadSequence != int64(len(c.replayAll(th.ID))) {
			t.Fatalf("thread/read: %+v", tr)
		}
		c.fail("thread/read", map[string]string{"threadId": unknownID("thr_")}, errs.NotFound)
		c.fail("turn/read", map[string]string{"threadId": th.ID, "turnId": unknownID("turn_")}, errs.NotFound)
		// A turn is read through its own thread only.
		c.fail("turn/read", map[string]string{"threadId": other.ID, "turnId": sub.Turn.ID}, errs.NotFound)
		c.fail("turn/read", map[string]string{"threadId": unknownID("thr_"), "turnId": sub.Turn.ID}, errs.NotFound)

		var al approvalsResult
		var raw json.RawMessage
		c.must("approval/list", map[string]any{}, &raw)
		decode(t, raw, &al)
		if al.Approvals == nil {
			t.Fatalf("approval/list: %s, want an array", raw)
		}
		c.must("approval/list", map[string]any{"threadId": th.ID}, &raw)
		if string(raw) != `{"approvals":[]}` {
			t.Fatalf("approval/list of an idle thread: %s", raw)
		}
		c.fail("approval/list", map[string]any{"threadId": unknownID("thr_")}, errs.NotFound)
	})

	t.Run("agents", func(t *testing.T) { testAgents(t, env) })

	// The error table, straight and through the gateway.
	t.Run("bad input/agentd.sock", func(t *testing.T) { testBadInput(t, dial(t, env)) })
	t.Run("bad input/gateway.sock", func(t *testing.T) { testBadInput(t, dialGateway(t, env)) })
}

// testAgents covers agent/run, continue, show and list: the JSON shapes
// of the agents commands, exact ids only.
func testAgents(t *testing.T, env *testkit.Env) {
	c := dial(t, env)
	ws := t.TempDir()
	c.fail("agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": "say hi"}, errs.WorkspaceUntrusted)
	c.fail("agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": " \n ", "trust": true}, errs.InvalidParams)
	c.fail("agent/run", map[string]any{"workspace": ws, "profile": "nope", "prompt": "say hi", "trust": true}, errs.InvalidParams)
	c.fail("agent/run", map[string]any{"workspace": ws, "provider": "codex", "prompt": "say hi", "trust": true}, errs.InvalidParams)
	c.fail("agent/run", map[string]any{"workspace": "rel", "profile": "script", "prompt": "say hi", "trust": true}, errs.InvalidParams)

	run := func(p map[string]any) agentd.AgentReceipt {
		t.Helper()
		var raw json.RawMessage
		c.must("agent/run", p, &raw)
		if k := keys(t, raw); k != "id,status" {
			t.Fatalf("agent/run receipt %s: members %s, want id,status", raw, k)
		}
		var r agentd.AgentReceipt
		decode(t, raw, &r)
		if !validShape("thr_", r.ID) || (r.Status != "queued" && r.Status != "running") {
			t.Fatalf("agent/run receipt %s", raw)
		}
		return r
	}
	show := func(id string, statuses ...string) (agentd.AgentView, string) {
		t.Helper()
		var raw json.RawMessage
		var v agentd.AgentView
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			c.must("agent/show", map[string]string{"id": id}, &raw)
			v = agentd.AgentView{}
			decode(t, raw, &v)
			if slices.Contains(statuses, v.Status) {
				return v, string(raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("agent %s is %s, not %v", id, v.Status, statuses)
		return v, ""
	}

	// By provider: the profile named like it.
	ok := run(map[string]any{"workspace": ws, "provider": "script", "prompt": "say agent says hi\nsession sess-secret-1", "trust": true})
	v, raw := show(ok.ID, "completed")
	if k := keys(t, []byte(raw)); k != "id,response,status" || v.Response != "agent says hi" || v.ID != ok.ID {
		t.Fatalf("agent/show of a completed agent: %s", raw)
	}
	// Provider session ids, prefixes and variants of ids are not agent ids.
	for _, id := range []string{"sess-secret-1", ok.ID[:10], ok.ID + "a", strings.ToUpper(ok.ID), strings.TrimPrefix(ok.ID, "thr_"), ""} {
		c.fail("agent/show", map[string]string{"id": id}, errs.NotFound)
		c.fail("agent/continue", map[string]string{"id": id, "prompt": "say x"}, errs.NotFound)
	}
	// A plain thread is not a logical agent.
	plain := c.newThreadIn(ws, "script")
	c.fail("agent/show", map[string]string{"id": plain.ID}, errs.NotFound)
	c.fail("agent/continue", map[string]string{"id": plain.ID, "prompt": "say x"}, errs.NotFound)

	// continue: the same logical agent, its durable session.
	var craw json.RawMessage
	c.must("agent/continue", map[string]string{"id": ok.ID, "prompt": "say-session"}, &craw)
	var cr agentd.AgentReceipt
	decode(t, craw, &cr)
	if k := keys(t, craw); k != "id,status" || cr.ID != ok.ID {
		t.Fatalf("agent/continue receipt %s", craw)
	}
	if v, raw := show(ok.ID, "completed"); v.Response != "session: sess-secret-1" {
		t.Fatalf("agent/show after continue: %s", raw)
	}
	c.fail("agent/continue", map[string]string{"id": ok.ID, "prompt": ""}, errs.InvalidParams)

	// A structured failure: code, message, retryable; the latest response kept.
	bad := run(map[string]any{"workspace": ws, "profile": "script", "prompt": "say partial\nfail WORKSPACE_CONFLICT busy elsewhere"})
	v, raw = show(bad.ID, "error")
	if k := keys(t, []byte(raw)); k != "error,errorCode,errorRetryable,id,response,status" || v.Response != "partial" || v.Error == nil ||
		v.Error.Code != errs.WorkspaceConflict || v.Error.Message != "busy elsewhere" || v.Error.Retryable ||
		v.ErrorCode != errs.WorkspaceConflict || v.ErrorRetryable == nil || *v.ErrorRetryable {
		t.Fatalf("agent/show of a failed agent: %s", raw)
	}
	var ewire map[string]json.RawMessage
	decode(t, []byte(raw), &ewire)
	if k := keys(t, ewire["error"]); k != "code,message,retryable" {
		t.Fatalf("agent/show error members %s", k)
	}

	// A running agent: status only.
	busy := run(map[string]any{"workspace": ws, "profile": "script", "prompt": "sleep 600s"})
	v, raw = show(busy.ID, "running")
	if k := keys(t, []byte(raw)); k != "id,status" {
		t.Fatalf("agent/show of a running agent: %s", raw)
	}
	// continue queues behind the running turn.
	c.must("agent/continue", map[string]string{"id": busy.ID, "prompt": "say later"}, &craw)
	decode(t, craw, &cr)
	if cr.Status != "queued" {
		t.Fatalf("agent/continue behind a running turn: %s", craw)
	}

	var lraw json.RawMessage
	c.must("agent/list", map[string]any{}, &lraw)
	var list struct {
		Agents []json.RawMessage `json:"agents"`
	}
	decode(t, lraw, &list)
	found := map[string]agentd.AgentSummary{}
	for _, a := range list.Agents {
		if k := keys(t, a); k != "id,profile,status,title" {
			t.Fatalf("agent/list entry %s", a)
		}
		var s agentd.AgentSummary
		decode(t, a, &s)
		found[s.ID] = s
	}
	if found[ok.ID].Title != "say agent says hi" || found[ok.ID].Profile != "script" || found[ok.ID].Status != "completed" ||
		found[bad.ID].Status != "error" || found[busy.ID].Status != "queued" && found[busy.ID].Status != "running" {
		t.Fatalf("agent/list: %s", lraw)
	}
	if _, listed := found[plain.ID]; listed {
		t.Fatalf("agent/list lists a plain thread: %s", lraw)
	}
	for _, secret := range []string{ws, "sess-secret-1", "createdAt", "workspace"} {
		if strings.Contains(string(lraw), secret) {
			t.Fatalf("agent/list shows %q: %s", secret, lraw)
		}
	}
	// End the busy agent's work: the queued turn first, so that it never
	// starts.
	tr := c.readThread(busy.ID)
	for i := len(tr.Turns) - 1; i >= 0; i-- {
		c.must("turn/interrupt", map[string]string{"threadId": busy.ID, "turnId": tr.Turns[i].ID}, nil)
	}
	v, raw = show(busy.ID, "error")
	if v.Error == nil || v.Error.Code != errs.ProviderCancelled || v.ErrorCode != errs.ProviderCancelled || v.ErrorRetryable == nil || *v.ErrorRetryable {
		t.Fatalf("agent/show of an interrupted agent: %s", raw)
	}
}

// testBadInput is the error table: unknown members, wrong types, missing
// values and ids of the wrong kind. Nothing it sends starts anything.
func testBadInput(t *testing.T, c *conn) {
	ws := t.TempDir()
	th := c.newThreadIn(ws, "script")
	turn := c.start(th.ID, "say hi")
	c.waitEnded(th.ID, turn.ID)
	in := map[string]string{"text": "say x"}
	for _, tc := range []struct {
		method string
		params map[string]any
		code   errs.Code
	}{
		// Unknown members, at the top and nested.
		{"thread/start", map[string]any{"workspace": ws, "bogus": 1}, errs.InvalidParams},
		{"thread/list", map[string]any{"bogus": 1}, errs.InvalidParams},
		{"thread/read", map[string]any{"threadId": th.ID, "bogus": 1}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": in, "priority": 1}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": map[string]any{"text": "say x", "images": []string{}}}, errs.InvalidParams},
		{"turn/enqueue", map[string]any{"threadId": th.ID, "messageId": "b1", "input": in, "bogus": true}, errs.InvalidParams},
		{"turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": turn.ID, "messageId": "b1", "input": in, "bogus": 1}, errs.InvalidParams},
		{"turn/interrupt", map[string]any{"threadId": th.ID, "turnId": turn.ID, "bogus": 1}, errs.InvalidParams},
		{"turn/read", map[string]any{"threadId": th.ID, "turnId": turn.ID, "bogus": 1}, errs.InvalidParams},
		{"turn/input/read", map[string]any{"threadId": th.ID, "messageId": "b1", "bogus": 1}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": 0, "bogus": 1}, errs.InvalidParams},
		{"approval/list", map[string]any{"bogus": 1}, errs.InvalidParams},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": 1, "decision": "approve", "bogus": 1}, errs.InvalidParams},
		{"agent/run", map[string]any{"workspace": ws, "prompt": "say x", "bogus": 1}, errs.InvalidParams},
		{"agent/continue", map[string]any{"id": th.ID, "prompt": "say x", "bogus": 1}, errs.InvalidParams},
		{"agent/show", map[string]any{"id": th.ID, "bogus": 1}, errs.InvalidParams},
		{"agent/list", map[string]any{"bogus": 1}, errs.InvalidParams},
		// Wrong types.
		{"turn/start", map[string]any{"threadId": 7, "messageId": "b1", "input": in}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": "say x"}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": "0"}, errs.InvalidParams},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": "1", "decision": "approve"}, errs.InvalidParams},
		// Missing or out of range.
		{"turn/start", map[string]any{"threadId": th.ID, "input": in}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1"}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": map[string]string{"text": " \t\n"}}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": map[string]string{"text": strings.Repeat("x", 256<<10+1)}}, errs.InvalidParams},
		{"turn/start", map[string]any{"threadId": th.ID, "messageId": "b1", "input": in, "profile": "nope"}, errs.InvalidParams},
		{"turn/enqueue", map[string]any{"threadId": th.ID, "messageId": strings.Repeat("k", 129), "input": in}, errs.InvalidParams},
		{"turn/steer", map[string]any{"threadId": th.ID, "messageId": "b1", "input": in}, errs.InvalidParams},
		{"turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": turn.ID, "input": in}, errs.InvalidParams},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": 1, "decision": "maybe"}, errs.InvalidParams},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": 0, "decision": "approve"}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": -1}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": 3, "through": 2}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": 0, "maxBytes": -1}, errs.InvalidParams},
		{"event/replay", map[string]any{"threadId": th.ID, "after": 0, "maxBytes": 768<<10 + 1}, errs.InvalidParams},
		// Ids of the wrong kind, malformed or unknown: NOT_FOUND.
		{"thread/read", map[string]any{"threadId": turn.ID}, errs.NotFound},
		{"thread/read", map[string]any{"threadId": th.ID[:12]}, errs.NotFound},
		{"thread/read", map[string]any{"threadId": ""}, errs.NotFound},
		{"turn/start", map[string]any{"threadId": turn.ID, "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/start", map[string]any{"threadId": unknownID("thr_"), "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/enqueue", map[string]any{"threadId": "thr_short", "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/read", map[string]any{"threadId": th.ID, "turnId": th.ID}, errs.NotFound},
		{"turn/read", map[string]any{"threadId": th.ID, "turnId": turn.ID[:10]}, errs.NotFound},
		{"turn/interrupt", map[string]any{"threadId": th.ID, "turnId": unknownID("item_")}, errs.NotFound},
		{"turn/interrupt", map[string]any{"threadId": unknownID("thr_"), "turnId": turn.ID}, errs.NotFound},
		{"turn/steer", map[string]any{"threadId": turn.ID, "expectedTurnId": turn.ID, "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": unknownID("turn_"), "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/steer", map[string]any{"threadId": th.ID, "expectedTurnId": th.ID, "messageId": "b1", "input": in}, errs.NotFound},
		{"turn/input/read", map[string]any{"threadId": turn.ID, "messageId": "b1"}, errs.NotFound},
		{"event/replay", map[string]any{"threadId": turn.ID, "after": 0}, errs.NotFound},
		{"event/replay", map[string]any{"threadId": unknownID("thr_"), "after": 0}, errs.NotFound},
		{"approval/list", map[string]any{"threadId": turn.ID}, errs.NotFound},
		{"approval/respond", map[string]any{"approvalId": turn.ID, "revision": 1, "decision": "approve"}, errs.NotFound},
		{"approval/respond", map[string]any{"approvalId": unknownID("appr_"), "revision": 1, "decision": "deny"}, errs.NotFound},
		{"agent/show", map[string]any{"id": turn.ID}, errs.NotFound},
		{"agent/continue", map[string]any{"id": unknownID("thr_"), "prompt": "say x"}, errs.NotFound},
		// Unknown methods.
		{"thread/delete", map[string]any{"threadId": th.ID}, errs.MethodNotFound},
	} {
		c.fail(tc.method, tc.params, tc.code)
	}
	// Nothing was started, queued or recorded.
	tr := c.readThread(th.ID)
	if tr.Thread.TurnCount != 1 || len(tr.Turns) != 1 {
		t.Fatalf("bad input changed the thread: %+v", tr)
	}
	var in2 map[string]json.RawMessage
	c.must("turn/input/read", map[string]string{"threadId": th.ID, "messageId": "b1"}, &in2)
	if string(in2["item"]) != "null" {
		t.Fatalf("bad input left a receipt: %s", in2["item"])
	}
}

func validShape(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	return ok && len(rest) == 16 && strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") == ""
}

// unknownID is a well-formed id that names nothing.
func unknownID(prefix string) string { return prefix + "aaaaaaaaaaaaaaaa" }
