package gateway_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

// TestBrowserNativeTurn: in headless Chromium, a turn of deepcode's own
// agent runtime (web/test/native.mjs) against a loopback fake model: the
// default profile, reasoning, a tool call and a Markdown answer.
func TestBrowserNativeTurn(t *testing.T) {
	t.Parallel()
	browser, webDir, node := browserPeers(t)
	model, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	env := testkit.NewEnv(t, testkit.Binaries(t))
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		t.Fatal(err)
	}
	cred := filepath.Join(t.TempDir(), "native.env")
	if err := os.WriteFile(cred, []byte("OPENAI_API_KEY=sk-browser-native\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("[profiles.deepcode]\nprovider = \"deepcode\"\napi = \"chat\"\nbase_url = %q\nmodel = \"fake-model\"\napproval_policy = \"auto\"\ncredentials_file = %q\n", model.URL+"/v1", cred)
	if err := os.WriteFile(paths.ConfigFile(env.Home), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() { env.Run("service", "stop", "--drain=false") })

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("test", "native.mjs"))
	cmd.Dir = webDir
	cmd.Env = append(os.Environ(), "DEEPCODE_URL="+webLink(t, env).URL, "DEEPCODE_WORKSPACE="+t.TempDir(), "DEEPCODE_CHROMIUM="+browser)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("native.mjs: %v", err)
	}
	if !strings.Contains(string(out), "checks passed") {
		t.Fatal("native.mjs did not finish its checks")
	}
	var asked bool
	for _, r := range model.Requests() {
		if strings.Contains(r.Prompt, "runtime answered") {
			asked = true
		}
	}
	if !asked {
		t.Fatal("the fake model was never asked: the turn did not run on the native runtime")
	}
}
