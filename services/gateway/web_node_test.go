package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestWebClientUnits runs the web client's unit tests (web/test/*.test.mjs:
// the contiguous event stream and the thread model) with Node.js.
func TestWebClientUnits(t *testing.T) {
	t.Parallel()
	webDir := filepath.Join(testkit.ModuleRoot(), "services", "gateway", "web")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping the web client's unit tests: node is not installed")
	}
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", "esbuild", "package.json")); err != nil {
		t.Skip("skipping the web client's unit tests: services/gateway/web/node_modules is missing (run `make web`)")
	}
	files, err := filepath.Glob(filepath.Join(webDir, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no unit tests in %s/test: %v", webDir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = webDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
