package activation

import "testing"

func TestPipeName(t *testing.T) {
	for _, name := range []string{"manager", "manager.sock"} {
		got, err := PipeName("abcdef234567", name)
		if err != nil || got != `\\.\pipe\deepcode-abcdef234567-manager` {
			t.Fatalf("PipeName(%q) = %q, %v", name, got, err)
		}
	}
	for _, bad := range [][2]string{{"", "manager"}, {"abc", ""}, {"ABC", "manager"}, {"abc", `..\x`}, {"abc", "a b"}, {"abc", "-x"}} {
		if got, err := PipeName(bad[0], bad[1]); err == nil {
			t.Errorf("PipeName(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

func TestPipeSDDL(t *testing.T) {
	sid := "S-1-5-21-3623811015-3361044348-30300820-1013"
	got, err := PipeSDDL(sid)
	if err != nil || got != "D:P(A;;GA;;;S-1-5-21-3623811015-3361044348-30300820-1013)" {
		t.Fatalf("PipeSDDL = %q, %v", got, err)
	}
	for _, bad := range []string{"", "WD", "S-1-5", "S-1-5-21)(A;;GA;;;WD", "s-1-5-21-1"} {
		if got, err := PipeSDDL(bad); err == nil {
			t.Errorf("PipeSDDL(%q) = %q, want an error", bad, got)
		}
	}
}
