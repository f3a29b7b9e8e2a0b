package agentd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCmdExeLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cmd.exe", "/d", "/s", "/c", `echo "a b" & exit /b 3`}, `cmd.exe /d /s /c "echo "a b" & exit /b 3"`},
		{[]string{`C:\Windows\System32\CMD.EXE`, "/C", "dir", "x y"}, `C:\Windows\System32\CMD.EXE /s /c "dir x y"`},
		{[]string{`C:\Program Files\x\cmd.exe`, "/c", ""}, `"C:\Program Files\x\cmd.exe" /s /c ""`},
	} {
		got, ok := cmdExeLine(tc.args)
		if !ok || got != tc.want {
			t.Errorf("cmdExeLine(%q) = %q, %v; want %q", tc.args, got, ok, tc.want)
		}
	}
	for _, args := range [][]string{{"cmd.exe"}, {"cmd.exe", "/k", "x"}, {"cmd.exe", "x", "/c", "y"}, {"sh.exe", "/c", "x"}, {"cmdx.exe", "/c", "x"}} {
		if line, ok := cmdExeLine(args); ok {
			t.Errorf("cmdExeLine(%q) = %q, want Go's own quoting", args, line)
		}
	}
}

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
	if err := startInGroup(cmd); err != nil {
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
