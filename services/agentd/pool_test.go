package agentd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
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

// runtimeProfiles is the configuration of a provider's test profiles:
// <p> (ask), <p>-auto, <p>-deny and <p>-missing (binary absent).
func runtimeProfiles(t testing.TB, provider, bin, baseURL, credFile, state string) string {
	t.Helper()
	var extra string
	switch provider {
	case "codex":
		extra = fmt.Sprintf("env = { CODEX_HOME = %q }\n", state)
	case "claude":
		// Claude retries a 429 ten times with backoff (minutes); one
		// retry keeps the rate-limit test short.
		extra = fmt.Sprintf("env = { CLAUDE_CONFIG_DIR = %q, CLAUDE_CODE_MAX_RETRIES = \"1\" }\n", state)
	case "opencode":
		extra = fmt.Sprintf("env = { XDG_DATA_HOME = %q, XDG_CONFIG_HOME = %q, XDG_CACHE_HOME = %q, XDG_STATE_HOME = %q }\n",
			filepath.Join(state, "data"), filepath.Join(state, "config"), filepath.Join(state, "cache"), filepath.Join(state, "state"))
	}
	var b strings.Builder
	for _, v := range []struct{ suffix, policy, bin string }{{"", "ask", bin}, {"-auto", "auto", bin}, {"-deny", "never", bin}, {"-missing", "ask", "/nonexistent/deepcode-test/" + provider}} {
		fmt.Fprintf(&b, "\n[profiles.%s%s]\nprovider = %q\nbinary = %q\nbase_url = %q\ncredentials_file = %q\nmodel = \"fake-model\"\napproval_policy = %q\n%s",
			provider, v.suffix, provider, v.bin, baseURL, credFile, v.policy, extra)
	}
	return b.String()
}

// startRuntimeRig starts a fake model server and an instance whose
// profiles use the provider's real CLI.
func startRuntimeRig(t *testing.T, provider string) *runtimeRig {
	t.Helper()
	bin := agentBinary(t, provider)
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
runtime_idle_timeout = "10m"
` + runtimeProfiles(t, provider, bin, base, credFile, filepath.Join(state, "home"))
	tmp := t.TempDir()
	env := startWith(t, cfg, "TMPDIR="+tmp)
	t.Cleanup(func() {
		// The credential never reaches the log.
		if b, err := os.ReadFile(env.Layout("").ServiceLog()); err == nil && strings.Contains(string(b), secret) {
			t.Errorf("service.log holds the credential")
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
		th := c.newThreadIn(ws, p)
		turn := c.start(th.ID, "shell echo approved > marker.txt\nsay command done")
		a := c.waitApproval(th.ID)
		if !strings.Contains(a.Summary+string(a.Details), "marker.txt") {
			t.Fatalf("approval %+v %s", a, a.Details)
		}
		c.waitTurn(th.ID, turn.ID, agentd.StatusWaitingApproval)
		c2 := dial(t, env)
		c2.must("approval/respond", respond(a.ID, a.Revision, "approve"), nil)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != "command done" {
			t.Fatalf("approved turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "marker.txt")); err != nil || strings.TrimSpace(string(b)) != "approved" {
			t.Fatalf("the approved command did not run: %q %v", b, err)
		}
		if len(itemsOf(done.Items, agentd.KindCommandExecution)) == 0 {
			t.Fatalf("no command item: %+v", done.Items)
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
