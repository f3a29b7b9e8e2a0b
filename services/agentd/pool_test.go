package agentd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

// EnvAgentBinDir names the folder holding the real agent CLIs (codex,
// claude, opencode) the runtime tests drive: .ci/run installs the pinned
// npm packages and sets it. Without it the tests look in .ci/run's default
// cache folder, and skip when a CLI is absent.
const EnvAgentBinDir = "DEEPCODE_TEST_AGENT_BIN_DIR"

// agentBinary is the path of a real agent CLI, or skips the test.
func agentBinary(t testing.TB, name string) string {
	t.Helper()
	dirs := []string{os.Getenv(EnvAgentBinDir)}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".cache", "deepcode-ci", "npm", "node_modules", ".bin"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	t.Skipf("%s is not installed: run .ci/run, or set %s to a folder holding it (npm install --prefix DIR of the pinned packages, DIR/node_modules/.bin)", name, EnvAgentBinDir)
	return ""
}

// runtimeRig is an instance whose profiles run a real agent CLI against a
// fake model server.
type runtimeRig struct {
	env      *testkit.Env
	model    *fakemodel.Server
	provider string
	secret   string
	// tmp is agentd's TMPDIR (opencode: where its runtimes' private
	// TMPDIRs go).
	tmp string
}

// stateDir is a private folder for a runtime's own state that is not under
// /tmp (codex refuses a CODEX_HOME there), removed at the end.
func stateDir(t testing.TB) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	if err := os.MkdirAll(filepath.Join(base, "deepcode-test"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(base, "deepcode-test"), "rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// checkItemsEnded fails unless every item of a turn is in one of statuses.
func checkItemsEnded(t *testing.T, items []agentd.Item, statuses ...string) {
	t.Helper()
	for _, it := range items {
		if !slices.Contains(statuses, it.Status) {
			t.Fatalf("item %s (%s) is %s, want one of %v: %s", it.ID, it.Kind, it.Status, statuses, it.Payload)
		}
	}
}

// runtimeHome is the HOME of the runtimes whose own state is in state
// (see runtimeProfiles), created.
func runtimeHome(t testing.TB, state string) string {
	t.Helper()
	home := filepath.Join(state, "user")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	return home
}

// runtimeProfiles is the configuration of a provider's test profiles:
// <p> (ask), <p>-auto, <p>-deny and <p>-missing (binary absent).
func runtimeProfiles(t testing.TB, provider, bin, baseURL, credFile, state string) string {
	t.Helper()
	// HOME is the runtime's own too: the CLIs run commands in login
	// shells, which would otherwise read this machine's dotfiles (a
	// pyenv init there waits 60 s for a lock that a runtime killed by an
	// earlier test left behind).
	home := runtimeHome(t, state)
	var extra string
	switch provider {
	case "codex":
		extra = fmt.Sprintf("env = { HOME = %q, CODEX_HOME = %q }\n", home, state)
	case "claude":
		// Claude retries a 429 ten times with backoff (minutes); one
		// retry keeps the rate-limit test short.
		extra = fmt.Sprintf("env = { HOME = %q, CLAUDE_CONFIG_DIR = %q, CLAUDE_CODE_MAX_RETRIES = \"1\" }\n", home, state)
	case "opencode":
		extra = fmt.Sprintf("env = { HOME = %q, XDG_DATA_HOME = %q, XDG_CONFIG_HOME = %q, XDG_CACHE_HOME = %q, XDG_STATE_HOME = %q }\n",
			home, filepath.Join(state, "data"), filepath.Join(state, "config"), filepath.Join(state, "cache"), filepath.Join(state, "state"))
	}
	var b strings.Builder
	for _, v := range []struct{ suffix, policy, bin string }{{"", "ask", bin}, {"-auto", "auto", bin}, {"-deny", "never", bin}, {"-missing", "ask", "/nonexistent/deepcode-test/" + provider}} {
		fmt.Fprintf(&b, "\n[profiles.%s%s]\nprovider = %q\nbinary = %q\nbase_url = %q\ncredentials_file = %q\nmodel = \"fake-model\"\napproval_policy = %q\n%s",
			provider, v.suffix, provider, v.bin, baseURL, credFile, v.policy, extra)
	}
	return b.String()
}

// startRuntimeRig starts a fake model server and an instance whose
// profiles use the provider's real CLI; agentdSettings are the lines of
// its [agentd] section (by default: a runtime idle period longer than any
// test).
func startRuntimeRig(t *testing.T, provider string, agentdSettings ...string) *runtimeRig {
	t.Helper()
	bin := agentBinary(t, provider)
	if len(agentdSettings) == 0 {
		agentdSettings = []string{`runtime_idle_timeout = "10m"`}
	}
	model, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	state := stateDir(t)
	secret := fmt.Sprintf("sk-deepcode-test-%d", time.Now().UnixNano())
	keyVar := map[string]string{"codex": "OPENAI_API_KEY", "claude": "ANTHROPIC_API_KEY", "opencode": "OPENCODE_API_KEY"}[provider]
	credFile := filepath.Join(state, "credentials")
	if err := os.WriteFile(credFile, []byte(keyVar+"="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := model.URL + "/v1"
	if provider == "claude" {
		base = model.URL
	}
	cfg := `
[service]
stop_timeout = "20s"

[agentd]
` + strings.Join(agentdSettings, "\n") + "\n" + runtimeProfiles(t, provider, bin, base, credFile, filepath.Join(state, "home"))
	tmp := t.TempDir()
	env := startWith(t, cfg, "TMPDIR="+tmp)
	t.Cleanup(func() {
		// The credential never reaches the log, nor the database that
		// holds every event, item, turn error and approval.
		l := env.Layout("")
		for _, f := range []string{l.ServiceLog(), l.Database, l.Database + "-wal"} {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), secret) {
				t.Errorf("%s holds the credential", f)
			}
		}
	})
	return &runtimeRig{env: env, model: model, provider: provider, secret: secret, tmp: tmp}
}

// runtimePIDs are the live processes of the provider's runtime in rig.
func (r *runtimeRig) runtimePIDs() []int {
	word := map[string]string{"codex": "app-server", "claude": "stream-json", "opencode": "serve"}[r.provider]
	return processesRunning(r.env, word)
}

// runtimeSuite is the behaviour every runtime provider must have, driven
// through agentd with the real CLI against the fake model.
func runtimeSuite(t *testing.T, provider string) *runtimeRig {
	rig := startRuntimeRig(t, provider)
	env := rig.env
	c := dial(t, env)
	p := provider

	t.Run("turn completes and the runtime stays warm", func(t *testing.T) {
		th := c.newThread(p)
		turn := c.start(th.ID, "say hello from the fake model")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "hello from the fake model" {
			t.Fatalf("turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		if msgs := messages(t, done.Items); len(msgs) == 0 || msgs[len(msgs)-1] != "hello from the fake model" {
			t.Fatalf("agent messages %q", msgs)
		}
		if len(itemsOf(done.Items, agentd.KindTokenUsage)) == 0 {
			t.Errorf("no token usage item: %+v", done.Items)
		}
		if ev := c.waitEvent(th.ID, agentd.EventItemDelta); !strings.Contains(string(ev.Payload), `"text"`) {
			t.Fatalf("delta %s", ev.Payload)
		}
		// The runtime sent the credential from the credential file.
		found := false
		for _, rq := range rig.model.Requests() {
			found = found || strings.Contains(rq.Auth, rig.secret)
		}
		if !found {
			t.Fatalf("no request carried the credential: %+v", rig.model.Requests())
		}
		pids := rig.runtimePIDs()
		if len(pids) == 0 {
			t.Fatal("no warm runtime after the turn")
		}
		if st := status(t, env); st.Services["agentd"].PID == 0 {
			t.Fatalf("agentd not running: %+v", st)
		}
		// A second turn reuses the warm runtime.
		turn2 := c.start(th.ID, "say second turn")
		done = c.waitEnded(th.ID, turn2.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "second turn" {
			t.Fatalf("second turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		after := rig.runtimePIDs()
		if fmt.Sprint(after) != fmt.Sprint(pids) {
			t.Fatalf("runtime processes %v after the second turn, %v before: not reused", after, pids)
		}
		// The second request carried the first turn (one session).
		reqs := rig.model.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Transcript, "hello from the fake model") {
			t.Fatalf("second turn's request lacks the first turn: %q", last.Transcript)
		}
	})

	t.Run("interrupt", func(t *testing.T) {
		th := c.newThread(p)
		turn := c.start(th.ID, "slow 1s\nsay one two three four five six seven eight nine ten eleven twelve")
		c.waitEvent(th.ID, agentd.EventItemDelta)
		c.must("turn/interrupt", map[string]string{"threadId": th.ID, "turnId": turn.ID}, nil)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusInterrupted || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderCancelled {
			t.Fatalf("interrupted turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		// The thread goes on.
		turn2 := c.start(th.ID, "say after the interrupt")
		if done := c.waitEnded(th.ID, turn2.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "after the interrupt" {
			t.Fatalf("turn after the interrupt: %+v %+v", done.Turn, done.Turn.Error)
		}
	})

	t.Run("approval answered by another client", func(t *testing.T) {
		ws := t.TempDir()
		// The client that starts the turn goes away: the approval stays
		// pending for every other client.
		starter := dial(t, env)
		th := starter.newThreadIn(ws, p)
		turn := starter.start(th.ID, "shell echo approved > marker.txt\nsay command done")
		a := starter.waitApproval(th.ID)
		if !strings.Contains(a.Summary+string(a.Details), "marker.txt") {
			t.Fatalf("approval %+v %s", a, a.Details)
		}
		starter.close()
		c.waitTurn(th.ID, turn.ID, agentd.StatusWaitingApproval)
		c2 := dial(t, env)
		var list approvalsResult
		c2.must("approval/list", map[string]string{"threadId": th.ID}, &list)
		if len(list.Approvals) != 1 || list.Approvals[0].ID != a.ID || list.Approvals[0].Status != "pending" {
			t.Fatalf("approvals after the starting client left: %+v", list)
		}
		c2.must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "command done" {
			t.Fatalf("approved turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "marker.txt")); err != nil || strings.TrimSpace(string(b)) != "approved" {
			t.Fatalf("the approved command did not run: %q %v", b, err)
		}
		cmds := itemsOf(done.Items, agentd.KindCommandExecution)
		if len(cmds) == 0 {
			t.Fatalf("no command item: %+v", done.Items)
		}
		var cmd runtime.CommandPayload
		decode(t, cmds[0].Payload, &cmd)
		if len(cmd.Command) == 0 || !strings.Contains(strings.Join(cmd.Command, " "), "marker.txt") {
			t.Fatalf("command item %s", cmds[0].Payload)
		}
	})

	t.Run("file change approved and recorded", func(t *testing.T) {
		// The runtime's own file-editing tool (codex apply_patch, claude
		// Write, opencode write): asked for in Ask mode, recorded as a
		// fileChange item with its path.
		for _, profile := range []string{p, p + "-auto"} {
			ws := t.TempDir()
			file := filepath.Join(ws, "notes-"+profile+".txt")
			th := c.newThreadIn(ws, profile)
			turn := c.start(th.ID, "write "+file+" written by the model\nsay file written")
			if profile == p {
				a := c.waitApproval(th.ID)
				if a.Kind != agentd.KindFileChange {
					t.Fatalf("%s: approval kind %q (%s), want %s", profile, a.Kind, a.Summary, agentd.KindFileChange)
				}
				if _, err := os.Stat(file); err == nil {
					t.Fatalf("%s: the file was written before its approval", profile)
				}
				dial(t, env).must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
			}
			done := c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "file written" {
				t.Fatalf("%s: turn %+v %+v", profile, done.Turn, done.Turn.Error)
			}
			if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != "written by the model" {
				t.Fatalf("%s: file %q %v", profile, b, err)
			}
			changes := itemsOf(done.Items, agentd.KindFileChange)
			if len(changes) != 1 || changes[0].Status != agentd.ItemCompleted {
				t.Fatalf("%s: file change items %+v", profile, changes)
			}
			var fc runtime.FileChangesPayload
			decode(t, changes[0].Payload, &fc)
			if len(fc.Changes) != 1 || fc.Changes[0].Path != file || fc.Changes[0].Action != "add" {
				t.Fatalf("%s: file change %s, want %s added", profile, changes[0].Payload, file)
			}
		}
	})

	t.Run("runtime killed mid-turn", func(t *testing.T) {
		// The runtime (not agentd) dies during a turn: the turn fails
		// with WORKER_CRASHED and the thread's next turn runs in a new
		// runtime that resumes the provider session.
		th := c.newThread(p)
		// The thread's runtime is what its first turn started (the
		// subtests run one at a time, and the pool closes runtimes but
		// starts none of its own).
		before := map[int]bool{}
		for _, pid := range rig.runtimePIDs() {
			before[pid] = true
		}
		first := c.start(th.ID, "say remember the word papaya")
		if done := c.waitEnded(th.ID, first.ID); done.Turn.Status != agentd.StatusCompleted {
			t.Fatalf("first turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		var own []int
		for _, pid := range rig.runtimePIDs() {
			if !before[pid] {
				own = append(own, pid)
			}
		}
		if len(own) == 0 {
			t.Fatal("the thread's first turn started no runtime")
		}
		turn := c.start(th.ID, "slow 1s\nsay a b c d e f g h i j k l m n o p")
		c.waitEventWhere(th.ID, agentd.EventItemDelta, func(ev agentd.Event) bool { return strings.Contains(string(ev.Payload), turn.ID) })
		for _, pid := range own {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill() // SIGKILL; the test package also builds for Windows
			}
		}
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.WorkerCrashed {
			t.Fatalf("turn whose runtime was killed: %+v %+v", done.Turn, done.Turn.Error)
		}
		checkItemsEnded(t, done.Items, agentd.ItemCompleted, agentd.ItemFailed)
		next := c.start(th.ID, "say back after the runtime died")
		if done := c.waitEnded(th.ID, next.ID); done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "back after the runtime died" {
			t.Fatalf("turn after the runtime died: %+v %+v", done.Turn, done.Turn.Error)
		}
		reqs := rig.model.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Transcript, "papaya") {
			t.Fatalf("the next turn's request lacks the session's first turn: %q", last.Transcript)
		}
	})

	t.Run("approval denied by policy", func(t *testing.T) {
		ws := t.TempDir()
		th := c.newThreadIn(ws, p+"-deny")
		turn := c.start(th.ID, "shell echo denied > marker.txt\nsay went on without it")
		done := c.waitEnded(th.ID, turn.ID)
		if _, err := os.Stat(filepath.Join(ws, "marker.txt")); err == nil {
			t.Fatal("the denied command ran")
		}
		if done.Turn.Status == agentd.StatusWaitingApproval || done.Turn.Status == agentd.StatusRunning {
			t.Fatalf("denied turn: %+v", done.Turn)
		}
	})

	t.Run("missing binary", func(t *testing.T) {
		th := c.newThread(p + "-missing")
		turn := c.start(th.ID, "say never")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderUnavailable ||
			!done.Turn.Error.Retryable || !strings.Contains(done.Turn.Error.Message, "npm install") {
			t.Fatalf("missing binary: %+v %+v", done.Turn, done.Turn.Error)
		}
	})

	t.Run("model error status", func(t *testing.T) {
		th := c.newThread(p)
		turn := c.start(th.ID, "status 401 invalid api key")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderAuthFailed {
			t.Fatalf("401 turn: %+v %+v", done.Turn, done.Turn.Error)
		}
	})

	t.Run("model rate limit", func(t *testing.T) {
		th := c.newThread(p)
		turn := c.start(th.ID, "status 429 slow down")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.ProviderRateLimited || !done.Turn.Error.Retryable {
			t.Fatalf("429 turn: %+v %+v", done.Turn, done.Turn.Error)
		}
	})

	t.Run("agentd killed mid-turn, agent continues the session", func(t *testing.T) {
		ws := t.TempDir()
		var agent agentd.AgentReceipt
		c.must("agent/run", map[string]any{"workspace": ws, "profile": p, "prompt": "say remember the word pineapple", "trust": true}, &agent)
		var v agentd.AgentView
		testkit.WaitFor(t, 2*time.Minute, "the agent's first turn", func() bool {
			c.must("agent/show", map[string]string{"id": agent.ID}, &v)
			return v.Status == "completed" || v.Status == "error"
		})
		if v.Status != "completed" || v.Response != "remember the word pineapple" {
			t.Fatalf("agent: %+v", v)
		}
		c.must("agent/continue", map[string]string{"id": agent.ID, "prompt": "slow 1s\nsay a b c d e f g h i j k l m n o p"}, nil)
		c.waitEventWhere(agent.ID, agentd.EventItemDelta, func(agentd.Event) bool { return true })
		old := rig.runtimePIDs()
		killAgentd(t, env)
		// The runtime does not outlive agentd.
		testkit.WaitFor(t, 30*time.Second, "the runtime to exit with agentd", func() bool {
			for _, pid := range old {
				if alive(pid) {
					return false
				}
			}
			return true
		})
		c.close()
		c = dial(t, env)
		testkit.WaitFor(t, 30*time.Second, "the crashed turn to be recovered", func() bool {
			c.must("agent/show", map[string]string{"id": agent.ID}, &v)
			return v.Status == "error"
		})
		if v.Error == nil || v.Error.Code != errs.WorkerCrashed {
			t.Fatalf("crashed agent: %+v", v)
		}
		c.must("agent/continue", map[string]string{"id": agent.ID, "prompt": "say resumed after the crash"}, nil)
		testkit.WaitFor(t, 2*time.Minute, "the continued agent", func() bool {
			c.must("agent/show", map[string]string{"id": agent.ID}, &v)
			return v.Status == "completed" || v.Status == "error"
		})
		if v.Status != "completed" || v.Response != "resumed after the crash" {
			t.Fatalf("continued agent: %+v", v)
		}
		// The provider session was resumed: the model saw the first turn.
		reqs := rig.model.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Transcript, "pineapple") {
			t.Fatalf("the continued turn's request lacks the session's first turn: %q", last.Transcript)
		}
	})

	t.Run("deepcode exec", func(t *testing.T) {
		ws := t.TempDir()
		cmd := env.Command(t.Context(), "deepcode", "exec", "--profile", p, "--workspace", ws, "--trust", "say through the CLI")
		cmd.Stdin = nil
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("deepcode exec: %v\n%s\n%s", err, out, stderr)
		}
		if !strings.Contains(string(out), "through the CLI") {
			t.Fatalf("deepcode exec printed %q", out)
		}
	})

	t.Run("deepcode agents run and continue", func(t *testing.T) {
		ws := t.TempDir()
		var receipt struct{ ID, Status string }
		env.MustRun("agents", "run", "--profile", p, "--workspace", ws, "--trust", "--json", "say the agent is called kiwi").JSON(t, &receipt)
		show := func(want string) {
			t.Helper()
			var v struct {
				ID, Status, Response string
				Error                *struct{ Code, Message string }
			}
			testkit.WaitFor(t, 2*time.Minute, "the agent's turn to end", func() bool {
				env.MustRun("agents", "show", receipt.ID, "--json").JSON(t, &v)
				return v.Status == "completed" || v.Status == "error"
			})
			if v.ID != receipt.ID || v.Status != "completed" || v.Response != want {
				t.Fatalf("deepcode agents show: %+v %+v", v, v.Error)
			}
		}
		show("the agent is called kiwi")
		env.MustRun("agents", "continue", receipt.ID, "--json", "say still kiwi")
		show("still kiwi")
		reqs := rig.model.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Transcript, "called kiwi") {
			t.Fatalf("the continued turn's request lacks the agent's first turn: %q", last.Transcript)
		}
	})

	t.Run("deepcode exec without a terminal denies in Ask mode", func(t *testing.T) {
		ws := t.TempDir()
		cmd := env.Command(t.Context(), "deepcode", "exec", "--profile", p, "--workspace", ws, "--trust", "shell echo ran > marker.txt\nsay after the request")
		cmd.Stdin = nil
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		if !strings.Contains(stderr.String(), "denied: not interactive") {
			t.Fatalf("deepcode exec: stdout %q stderr %q", out, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(ws, "marker.txt")); err == nil {
			t.Fatal("the command ran although the approval was denied")
		}
	})
	return rig
}

// TestWarmRuntimeKeepsAgentdAwake: a warm runtime is agentd activity. An
// agentd that would exit after 1 s without work stays while its thread's
// runtime is warm, and exits once the pool has closed it.
func TestWarmRuntimeKeepsAgentdAwake(t *testing.T) {
	const runtimeIdle = 8 * time.Second
	rig := startRuntimeRig(t, "codex", `idle_timeout = "1s"`, fmt.Sprintf("runtime_idle_timeout = %q", runtimeIdle.String()))
	c := dial(t, rig.env)
	th := c.newThread("codex")
	turn := c.start(th.ID, "say stay awake")
	if done := c.waitEnded(th.ID, turn.ID); done.Turn.Status != agentd.StatusCompleted {
		t.Fatalf("turn: %+v %+v", done.Turn, done.Turn.Error)
	}
	ended := time.Now()
	pid := agentdPID(t, rig.env)
	runtimes := rig.runtimePIDs()
	c.close()
	// Well past agentd's own idle period, well within the runtime's.
	time.Sleep(3 * time.Second)
	st := status(t, rig.env)
	if time.Since(ended) >= runtimeIdle {
		// The machine stalled past the runtime's idle period: what is
		// left to check is that both exit.
		t.Logf("status read %s after the turn, past the runtime's idle period: not checked", time.Since(ended))
	} else if got := st.Services["agentd"]; got.PID != pid || !alive(pid) || got.Activity.Runtimes != 1 {
		t.Fatalf("agentd with a warm runtime: %+v (was pid %d)", got, pid)
	}
	testkit.WaitFor(t, runtimeIdle+30*time.Second, "the idle runtime and then agentd to exit", func() bool {
		for _, p := range append(runtimes, pid) {
			if alive(p) {
				return false
			}
		}
		return true
	})
}
