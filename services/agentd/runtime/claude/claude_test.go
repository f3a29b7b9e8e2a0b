package claude

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime/runtimetest"
)

// TestArgs: a profile's extra arguments end the runtime's command line, and
// a change of them (or of the model) is a new runtime: the pool key
// differs.
func TestArgs(t *testing.T) {
	var p Provider
	runtimetest.CheckArgs(t, "claude", claudeArgs, p.key)
	other := runtimetest.Turn()
	other.Model = "m2" // a turn's own model
	if p.key(runtimetest.Turn(), "claude") == p.key(other, "claude") || !slices.Contains(claudeArgs("claude", other), "m2") {
		t.Error("claude: a turn's own model does not reach the runtime")
	}
}

// TestFileAction: Edit changes a file that is there (or fails); Write adds
// one unless it is there (runtime.NewFileAction).
func TestFileAction(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "there.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := claudeFileAction("Edit", "new.txt", ws); got != "update" {
		t.Errorf("claude Edit of a missing file = %q, want update", got)
	}
	if got := claudeFileAction("Write", "new.txt", ws); got != "add" {
		t.Errorf("claude Write of a new file = %q, want add", got)
	}
	if got := claudeFileAction("Write", "there.txt", ws); got != "update" {
		t.Errorf("claude Write of a file that is there = %q, want update", got)
	}
}
