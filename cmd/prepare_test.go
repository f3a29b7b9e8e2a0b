package cmd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPrepareTestsListsSkips: on a machine without Node.js, Chromium, tmux
// and systemd, .ci/prepare-tests (which make test runs first) prepares
// nothing and lists each group make test will skip, with the command that
// enables it: nothing is skipped silently.
func TestPrepareTestsListsSkips(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a bash script")
	}
	bin := t.TempDir()
	for _, tool := range []string{"bash", "cat", "id", "mkdir", "dirname"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "skipped")
	cmd := exec.Command(filepath.Join(bin, "bash"), filepath.Join("..", ".ci", "prepare-tests"))
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir(), "SKIPPED_FILE=" + out}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("prepare-tests: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	list := string(b)
	for _, want := range []string{"no Node.js", "apt-get install nodejs npm", "apt-get install chromium", "apt-get install tmux", "apt-get install systemd", "TestDebPackage"} {
		if !strings.Contains(list, want) {
			t.Errorf("the skip list does not say %q:\n%s", want, list)
		}
	}
}
