//go:build linux

package agentd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestStorageFullDegradesAndRecovers: when agentd's database is on a full
// filesystem, its writes fail with STORAGE_FULL, `service status` shows
// agentd degraded with that code and a reason naming the database (the
// instance not ready), further writes are refused at once with the same
// retryable code — and once space returns agentd is ready again by itself
// and writes work.
func TestStorageFullDegradesAndRecovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	db := filepath.Join(dir, "deepcode.sqlite3")
	env := startWith(t, testConfig, "DEEPCODE_DATABASE="+db)
	c := dial(t, env)
	th := c.newThread("shell")

	// Fill the filesystem with a file beside the database.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	_ = f.Close()

	// The turn's admission, or else its output, needs room the filesystem
	// does not have.
	var res api.TurnSubmitResult
	if err := c.call(api.MethodTurnStart, map[string]any{"threadId": th.ID, "messageId": msgID(),
		"input": map[string]any{"text": "head -c 8000000 /dev/zero | tr '\\0' a | fold -w 100"}}, &res); err != nil && !errs.Is(err, errs.StorageFull) {
		t.Fatalf("turn/start on a full filesystem: %v; want STORAGE_FULL", err)
	}
	degraded := func() (mgmt.ServiceState, bool) {
		st := status(t, env)
		s := st.Services["agentd"]
		return s, s.State == "degraded" && !st.Ready
	}
	testkit.WaitFor(t, 2*time.Minute, "agentd degraded in status", func() bool { _, ok := degraded(); return ok })
	s, _ := degraded()
	if s.Code != errs.StorageFull || !strings.Contains(s.Reason, db) || !strings.Contains(s.Reason, "free") {
		t.Fatalf("agentd in status: %+v; want STORAGE_FULL naming %s and the free space", s, db)
	}
	// Writes are refused with the same retryable code, and its reason.
	e := c.fail(api.MethodThreadStart, map[string]any{"workspace": t.TempDir(), "profile": "shell"}, errs.StorageFull)
	if !strings.Contains(e.Message, db) {
		t.Fatalf("refused write: %q does not name the database", e.Message)
	}

	// Space returns: agentd is ready again by itself, and writes work.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "agentd ready again", func() bool {
		st := status(t, env)
		return st.Ready && st.Services["agentd"].State == "running"
	})
	c.newThread("shell")
}
