package agentd_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/native"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

// nativeRig is an instance whose profiles run the deepcode provider
// against the fake model in each dialect: native-responses, native-chat,
// native-anthropic (approval_policy "ask"), native-auto (chat, "auto"), and
// the built-in "deepcode" profile configured with a model, which makes it
// the default profile.
type nativeRig struct {
	env    *testkit.Env
	model  *fakemodel.Server
	secret string
}

func startNative(t *testing.T, extra ...string) *nativeRig {
	t.Helper()
	model, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	state := stateDir(t)
	secret := fmt.Sprintf("sk-native-%d", time.Now().UnixNano())
	cred := func(name string) string {
		f := filepath.Join(state, name+".env")
		if err := os.WriteFile(f, []byte("OPENAI_API_KEY="+secret+"\nANTHROPIC_API_KEY="+secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	var cfg strings.Builder
	cfg.WriteString("[service]\nstop_timeout = \"20s\"\n")
	for _, p := range []struct{ name, api, base, policy string }{
		{"native-responses", "responses", model.URL + "/v1", "ask"},
		{"native-chat", "chat", model.URL + "/v1", "ask"},
		{"native-anthropic", "anthropic", model.URL, "ask"},
		{"native-auto", "chat", model.URL + "/v1", "auto"},
		{"deepcode", "chat", model.URL + "/v1", "ask"},
	} {
		fmt.Fprintf(&cfg, "\n[profiles.%s]\nprovider = \"deepcode\"\napi = %q\nbase_url = %q\nmodel = \"fake-model\"\napproval_policy = %q\ncredentials_file = %q\n",
			p.name, p.api, p.base, p.policy, cred(p.name))
	}
	cfg.WriteString(strings.Join(extra, "\n"))
	env := startWith(t, cfg.String())
	t.Cleanup(func() {
		l := env.Layout("")
		for _, f := range []string{l.ServiceLog(), l.Database, l.Database + "-wal"} {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), secret) {
				t.Errorf("%s holds the credential", f)
			}
		}
	})
	return &nativeRig{env: env, model: model, secret: secret}
}

// lastRequest is the fake model's latest request for prompt.
func (r *nativeRig) lastRequest(t *testing.T, prompt string) fakemodel.Request {
	t.Helper()
	reqs := r.model.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Prompt == prompt {
			return reqs[i]
		}
	}
	t.Fatalf("no model request for %q", prompt)
	return fakemodel.Request{}
}

func toolPayload(t *testing.T, it agentd.Item) native.ToolPayload {
	t.Helper()
	var p native.ToolPayload
	decode(t, it.Payload, &p)
	return p
}

// toolItems are a turn's tool call items.
func toolItems(items []agentd.Item) []agentd.Item {
	var out []agentd.Item
	for _, it := range items {
		if strings.Contains(string(it.Payload), `"callId"`) {
			out = append(out, it)
		}
	}
	return out
}

func TestNativeProvider(t *testing.T) {
	t.Parallel()
	rig := startNative(t)
	c := dial(t, rig.env)

	for _, p := range []string{"native-responses", "native-chat", "native-anthropic"} {
		t.Run(p+" turns with tools", func(t *testing.T) {
			ws := t.TempDir()
			th := c.newThreadIn(ws, p)
			turn := c.start(th.ID, "say hello from the fake model")
			done := c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "hello from the fake model" {
				t.Fatalf("turn %+v %+v", done.Turn, done.Turn.Error)
			}
			if len(itemsOf(done.Items, agentd.KindTokenUsage)) != 1 {
				t.Fatalf("no token usage: %+v", done.Items)
			}
			// A tool turn: the approval is answered by the client.
			prompt := "tool write_file {\"path\":\"a.txt\",\"content\":\"one\\n\"}\ntool read_file {\"path\":\"a.txt\"}\nsay wrote it"
			turn = c.start(th.ID, prompt)
			a := c.waitApproval(th.ID)
			if a.Kind != "fileChange" || !strings.Contains(string(a.Details), `+one`) {
				t.Fatalf("approval %+v %s", a, a.Details)
			}
			c.must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
			done = c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "wrote it" {
				t.Fatalf("tool turn %+v %+v", done.Turn, done.Turn.Error)
			}
			tools := toolItems(done.Items)
			if len(tools) != 2 || tools[0].Kind != agentd.KindFileChange || tools[1].Kind != "toolCall" {
				t.Fatalf("tool items %+v", tools)
			}
			fc := toolPayload(t, tools[0])
			if fc.State != native.StateCompleted || fc.Action != "add" || !strings.Contains(fc.Diff, "+one") || tools[0].Status != agentd.ItemCompleted {
				t.Fatalf("file change %+v", fc)
			}
			if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one\n" {
				t.Fatalf("a.txt %q", b)
			}
			req := rig.lastRequest(t, prompt)
			if len(req.ToolResults) != 2 || !strings.Contains(req.ToolResults[1], "one") || !strings.Contains(req.Auth, rig.secret) {
				t.Fatalf("request %+v", req)
			}
			// The history comes from the thread's items: a new turn
			// sends the earlier ones.
			turn = c.start(th.ID, "say third")
			c.waitEnded(th.ID, turn.ID)
			if tr := rig.lastRequest(t, "say third").Transcript; !strings.Contains(tr, "hello from the fake model") {
				t.Fatalf("transcript %q", tr)
			}
		})
	}

	t.Run("approval answered by a second client, and denied", func(t *testing.T) {
		ws := t.TempDir()
		starter := dial(t, rig.env)
		th := starter.newThreadIn(ws, "native-chat")
		turn := starter.start(th.ID, "tool shell {\"command\":\"echo approved > ok.txt\"}\ntool shell {\"command\":\"echo no > denied.txt\"}\nsay done")
		a := starter.waitApproval(th.ID)
		starter.close()
		other := dial(t, rig.env)
		other.must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
		var second agentd.Approval
		testkit.WaitFor(t, time.Minute, "the second approval", func() bool {
			var l approvalsResult
			other.must("approval/list", map[string]string{"threadId": th.ID}, &l)
			for _, x := range l.Approvals {
				if x.ID != a.ID {
					second = x
					return true
				}
			}
			return false
		})
		other.must("approval/respond", respond(second.ID, second.Revision, "deny"), nil)
		done := other.waitEnded(th.ID, turn.ID)
		tools := toolItems(done.Items)
		if done.Turn.Status != agentd.StatusCompleted || len(tools) != 2 || toolPayload(t, tools[0]).State != native.StateCompleted || toolPayload(t, tools[1]).State != native.StateDenied {
			t.Fatalf("turn %+v items %+v", done.Turn, tools)
		}
		if _, err := os.Stat(filepath.Join(ws, "denied.txt")); err == nil {
			t.Fatal("the denied command ran")
		}
		if _, err := os.Stat(filepath.Join(ws, "ok.txt")); err != nil {
			t.Fatal("the approved command did not run")
		}
	})

	t.Run("interrupt during a tool", func(t *testing.T) {
		th := c.newThread("native-auto")
		turn := c.start(th.ID, "tool shell {\"command\":\"echo begun; sleep 600\"}\nsay not reached")
		c.waitEventWhere(th.ID, agentd.EventItemDelta, func(ev agentd.Event) bool { return strings.Contains(string(ev.Payload), "begun") })
		c.must("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": turn.ID}, nil)
		done := c.waitEnded(th.ID, turn.ID)
		tools := toolItems(done.Items)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error.Code != errs.ProviderCancelled || len(tools) != 1 {
			t.Fatalf("turn %+v %+v", done.Turn, tools)
		}
		if p := toolPayload(t, tools[0]); p.State != native.StateCancelled || !strings.Contains(p.Output, "begun") {
			t.Fatalf("interrupted call %+v", p)
		}
		if pids := processesRunning(rig.env, "sleep 600"); len(pids) != 0 {
			t.Fatalf("the command still runs: %v", pids)
		}
		// The whole output is the item's blob.
		var blob api.TurnItemBlobResult
		c.must(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: tools[0].ID, Name: "output"}, &blob)
		if string(blob.Data) != "begun\n" || blob.Size != 6 || !blob.EOF {
			t.Fatalf("blob %+v", blob)
		}
		c.fail(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: tools[0].ID, Name: "before"}, errs.NotFound)
		c.fail(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: tools[0].ID, Name: "passwd"}, errs.InvalidParams)
		c.fail(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: "item_x", Name: "output"}, errs.NotFound)
		c.fail(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: tools[0].ID, Name: "output", Offset: 99}, errs.InvalidParams)
		c.fail(api.MethodTurnItemBlob, api.TurnItemBlobParams{ThreadID: th.ID, TurnID: turn.ID, ItemID: tools[0].ID, Name: "output", MaxBytes: 1 << 30}, errs.InvalidParams)
	})

	t.Run("model errors", func(t *testing.T) {
		th := c.newThread("native-responses")
		for prompt, code := range map[string]errs.Code{"status 401": errs.ProviderAuthFailed, "status 404": errs.ProviderUnavailable, "flaky 500 9 0": errs.ProviderUnavailable} {
			turn := c.start(th.ID, prompt)
			done := c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != code {
				t.Fatalf("%s: %+v %+v", prompt, done.Turn, done.Turn.Error)
			}
		}
	})

	t.Run("the configured deepcode profile is the default", func(t *testing.T) {
		var r threadResult
		c.must("thread/start", map[string]any{"workspace": t.TempDir(), "trust": true}, &r)
		if r.Thread.Profile != "deepcode" {
			t.Fatalf("default profile %q", r.Thread.Profile)
		}
	})

	t.Run("deepcode exec runs a native turn", func(t *testing.T) {
		ws := t.TempDir()
		res := rig.env.MustRun("exec", "--workspace", ws, "--trust", "say hello from exec")
		if !strings.Contains(res.Stdout, "hello from exec") {
			t.Fatalf("exec stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		// Without a terminal, approvals are denied: the command does not run.
		cmd := rig.env.Command(t.Context(), "deepcode", "exec", "--workspace", ws, "tool shell {\"command\":\"echo ran > marker.txt\"}\nsay after the request")
		cmd.Stdin = nil
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		if !strings.Contains(stderr.String(), "denied: not interactive") || !strings.Contains(string(out), "after the request") {
			t.Fatalf("deepcode exec: stdout %q stderr %q", out, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(ws, "marker.txt")); err == nil {
			t.Fatal("the command ran although the approval was denied")
		}
	})
}

// TestNativeCrashAtEachToolCallState SIGKILLs agentd with one tool call
// in each state: proposed (waiting for approval), running (a command that
// sleeps), completed (the model's next answer is pending). After the
// restart: the running call is unknown, never run again, and the next turn
// tells the model so; the proposed call is proposed again and runs once
// approved; the completed call is not repeated.
func TestNativeCrashAtEachToolCallState(t *testing.T) {
	t.Parallel()
	rig := startNative(t)
	c := dial(t, rig.env)
	ws := t.TempDir()
	count := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(ws, name))
		return strings.Count(string(b), "\n")
	}

	proposed := c.newThreadIn(ws, "native-chat")
	pTurn := c.start(proposed.ID, "tool shell {\"command\":\"echo p >> proposed.txt\"}\nsay proposed done")
	c.waitApproval(proposed.ID)

	running := c.newThreadIn(ws, "native-auto")
	rTurn := c.start(running.ID, "tool shell {\"command\":\"echo r >> running.txt; sleep 600\"}\nsay running done")
	c.waitEventWhere(running.ID, agentd.EventItemDelta, func(ev agentd.Event) bool { return strings.Contains(string(ev.Payload), `"running"`) })
	testkit.WaitFor(t, 30*time.Second, "the command to run", func() bool { return count("running.txt") == 1 })

	completed := c.newThreadIn(ws, "native-auto")
	cTurn := c.start(completed.ID, "tool shell {\"command\":\"echo c >> completed.txt\"}\nsleep 600s\nsay completed done")
	c.waitEventWhere(completed.ID, agentd.EventItemCompleted, func(ev agentd.Event) bool { return strings.Contains(string(ev.Payload), `"state":"completed"`) })

	oldPID := killAgentd(t, rig.env)
	c.close()
	testkit.WaitFor(t, 30*time.Second, "the command to die with agentd", func() bool { return len(processesRunning(rig.env, "sleep 600")) == 0 })

	c = dial(t, rig.env)
	testkit.WaitFor(t, 30*time.Second, "a new agentd", func() bool { pid := agentdPID(t, rig.env); return pid != 0 && pid != oldPID })
	state := func(threadID, turnID string) native.ToolPayload {
		t.Helper()
		done := c.waitEnded(threadID, turnID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.WorkerCrashed {
			t.Fatalf("crashed turn %+v %+v", done.Turn, done.Turn.Error)
		}
		tools := toolItems(done.Items)
		if len(tools) != 1 {
			t.Fatalf("tool items %+v", tools)
		}
		return toolPayload(t, tools[0])
	}
	if p := state(proposed.ID, pTurn.ID); p.State != native.StateNotRun {
		t.Fatalf("proposed call after the crash: %+v", p)
	}
	if p := state(running.ID, rTurn.ID); p.State != native.StateUnknown {
		t.Fatalf("running call after the crash: %+v", p)
	}
	if p := state(completed.ID, cTurn.ID); p.State != native.StateCompleted {
		t.Fatalf("completed call after the crash: %+v", p)
	}

	// The next turns.
	next := func(th agentd.Thread, prompt string) turnReadResult {
		t.Helper()
		turn := c.start(th.ID, prompt)
		return c.waitEnded(th.ID, turn.ID)
	}
	// running → unknown: not run again; the model is told.
	if done := next(running, "say checked"); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn after the crash %+v %+v", done.Turn, done.Turn.Error)
	}
	if req := rig.lastRequest(t, "say checked"); len(req.AllToolResults) != 1 || !strings.Contains(req.AllToolResults[0], "outcome") && !strings.Contains(req.AllToolResults[0], "unknown") {
		t.Fatalf("the model was told %q", req.AllToolResults)
	}
	// completed: not repeated.
	if done := next(completed, "say again"); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("%+v", done.Turn)
	}
	if req := rig.lastRequest(t, "say again"); len(req.AllToolResults) != 1 || !strings.HasPrefix(req.AllToolResults[0], "exit code 0") {
		t.Fatalf("the model was told %q", req.AllToolResults)
	}
	// proposed → notRun: proposed again, runs once approved.
	turn := c.start(proposed.ID, "say proposed again")
	a := c.waitApproval(proposed.ID)
	if !strings.Contains(a.Summary, "proposed again") {
		t.Fatalf("approval %+v", a)
	}
	c.must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
	done := c.waitEnded(proposed.ID, turn.ID)
	if done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("%+v %+v", done.Turn, done.Turn.Error)
	}
	if tools := toolItems(done.Items); len(tools) != 1 || toolPayload(t, tools[0]).ReproposedFrom == "" || toolPayload(t, tools[0]).State != native.StateCompleted {
		t.Fatalf("re-proposed call %+v", tools)
	}
	if req := rig.lastRequest(t, "say proposed again"); len(req.AllToolResults) != 1 || !strings.HasPrefix(req.AllToolResults[0], "exit code 0") {
		t.Fatalf("the model was told %q", req.AllToolResults)
	}
	if p, r, cc := count("proposed.txt"), count("running.txt"), count("completed.txt"); p != 1 || r != 1 || cc != 1 {
		t.Fatalf("runs: proposed %d, running %d, completed %d; want 1 each", p, r, cc)
	}
}
