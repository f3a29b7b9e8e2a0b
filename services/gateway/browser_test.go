//go:build linux

package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// browserPeers are what a browser test needs, or it skips saying how to
// get them: Chromium, the web client's npm packages (playwright-core), node.
func browserPeers(t *testing.T) (browser, webDir, node string) {
	t.Helper()
	browser = os.Getenv("DEEPCODE_CHROMIUM")
	if browser == "" {
		browser = "/usr/bin/chromium"
	}
	if _, err := os.Stat(browser); err != nil {
		t.Skipf("skipping the browser test: no Chromium at %s (apt-get install chromium, or set DEEPCODE_CHROMIUM)", browser)
	}
	webDir = filepath.Join(testkit.ModuleRoot(), "services", "gateway", "web")
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Skip("skipping the browser test: services/gateway/web/node_modules/playwright-core is missing (run `make web`, which runs npm ci)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping the browser test: node is not installed")
	}
	return browser, webDir, node
}

// TestBrowserWebClient runs the packaged web client in headless Chromium
// (web/test/e2e.mjs, playwright-core) against a real instance: the
// `deepcode web` link, refused WebSockets, a thread and turns with the
// script provider, an approval, gap recovery and reconnection, the retry
// contract, and a gateway SIGKILLed mid-turn (the supervisor restarts it;
// browser sessions end with it, so the page asks for a new link and then
// shows every event exactly once).
func TestBrowserWebClient(t *testing.T) {
	t.Parallel()
	browser, webDir, node := browserPeers(t)

	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.MustRun("service", "start", "--port", "0")
	workspace := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "e2e.mjs"))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(),
		"DEEPCODE_URL="+webLink(t, env).URL,
		"DEEPCODE_WORKSPACE="+workspace,
		"DEEPCODE_CHROMIUM="+browser,
	)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The script's requests arrive on its stdout as `@@ {"need": …}`.
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		req, ok := strings.CutPrefix(line, "@@ ")
		if !ok {
			t.Log(line)
			continue
		}
		var r struct {
			Need string `json:"need"`
		}
		_ = json.Unmarshal([]byte(req), &r)
		answer := map[string]any{}
		switch r.Need {
		case "kill-gateway":
			killGateway(t, env)
			answer["ok"] = true
		case "link":
			answer["url"] = webLink(t, env).URL
		case "threads":
			answer["total"] = addThreads(t, env, workspace, 120)
		case "drain", "resume":
			manage(t, env, r.Need)
			answer["ok"] = true
		default:
			answer["error"] = fmt.Sprintf("unknown request %q", r.Need)
		}
		b, _ := json.Marshal(answer)
		if _, err := io.WriteString(stdin, string(b)+"\n"); err != nil {
			t.Errorf("answering %s: %v", r.Need, err)
		}
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the browser test failed (%v)\nstderr:\n%s", err, stderr.String())
	}
}

type link struct {
	URL        string `json:"url"`
	InstanceID string `json:"instanceId"`
	ExpiresIn  int    `json:"expiresIn"`
}

// webLink is a fresh link from `deepcode web --no-open --json`.
func webLink(t *testing.T, env *testkit.Env) link {
	t.Helper()
	var l link
	env.MustRun("web", "--no-open", "--json").JSON(t, &l)
	if !strings.HasPrefix(l.URL, "http://127.0.0.1:") || !strings.Contains(l.URL, "/#ticket=") || l.InstanceID == "" || l.ExpiresIn != 60 {
		t.Fatalf("deepcode web --json: %+v", l)
	}
	return l
}

type serviceStatus struct {
	Running bool `json:"running"`
	mgmt.Status
}

func gatewayPID(t *testing.T, env *testkit.Env) (int, string) {
	t.Helper()
	r := env.Run("service", "status", "--json")
	var st serviceStatus
	if json.Unmarshal([]byte(r.Stdout), &st) != nil {
		return 0, ""
	}
	gw := st.Services["gateway"]
	return gw.PID, gw.State
}

// killGateway SIGKILLs the gateway and waits until the supervisor's
// replacement is registered and running.
func killGateway(t *testing.T, env *testkit.Env) {
	t.Helper()
	pid, state := gatewayPID(t, env)
	if pid == 0 || state != "running" {
		t.Fatalf("gateway pid %d, state %q", pid, state)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill gateway %d: %v", pid, err)
	}
	t.Logf("SIGKILLed the gateway (pid %d)", pid)
	testkit.WaitFor(t, 60*time.Second, "the supervisor to restart the gateway", func() bool {
		p, s := gatewayPID(t, env)
		return p != 0 && p != pid && s == "running"
	})
}

// addThreads starts n more threads in workspace and returns how many
// threads the instance has.
func addThreads(t *testing.T, env *testkit.Env, workspace string, n int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.ConnectBusiness(ctx, env.Layout(""), client.BusinessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		if err := c.Call(ctx, api.MethodThreadStart, map[string]any{"workspace": workspace, "profile": "script", "title": fmt.Sprintf("listed %03d", i), "trust": true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for cursor := ""; ; {
		var page struct {
			Threads    []json.RawMessage `json:"threads"`
			NextCursor string            `json:"nextCursor"`
		}
		p := map[string]any{"limit": 100}
		if cursor != "" {
			p["cursor"] = cursor
		}
		if err := c.Call(ctx, api.MethodThreadList, p, &page); err != nil {
			t.Fatal(err)
		}
		total += len(page.Threads)
		if cursor = page.NextCursor; cursor == "" {
			return total
		}
	}
}

// manage sends mgmt drain (which answers once nothing is running; the
// phase stays draining) or resume to the instance.
func manage(t *testing.T, env *testkit.Env, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := client.Connect(ctx, env.Layout(""), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if what == "drain" {
		timeout := 30.0
		err = m.Call(ctx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: &timeout}, nil)
	} else {
		err = m.Call(ctx, mgmt.MethodResume, map[string]any{}, nil)
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
