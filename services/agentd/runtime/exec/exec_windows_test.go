package exec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
)

// The built-in shell profile's command reaches cmd.exe as written: quotes,
// redirection, & and the exit code.
func TestShellProfileRunsCmdExe(t *testing.T) {
	dir := t.TempDir()
	prompt := `echo "a b" > "out file.txt" & echo 100%& exit /b 3`
	argv, stdin := commandLine([]string{"cmd.exe", "/d", "/s", "/c", "{prompt}"}, prompt)
	if stdin {
		t.Fatal("the prompt went to stdin")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runtime.StartInGroup(cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit code %d (%v), want 3; output %q", code, err, out.String())
	}
	if got := strings.TrimSpace(out.String()); got != "100%" {
		t.Errorf("output %q, want 100%%", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out file.txt"))
	if err != nil || strings.TrimSpace(string(b)) != `"a b"` {
		t.Fatalf("redirected file: %q, %v", b, err)
	}
}
