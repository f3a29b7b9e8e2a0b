package runtime

import "testing"

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
