package claude

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/config"
)

// TestArgs: a profile's extra arguments end the runtime's command line, and
// a change of them (or of the model) is a new runtime: the pool key
// differs.
func TestArgs(t *testing.T) {
	turn := func(args ...string) *runtime.TurnRun {
		return &runtime.TurnRun{ProfileName: "p", Workspace: "/w", Profile: config.Profile{Model: "m1", BaseURL: "http://127.0.0.1:1/v1", Args: args}}
	}
	argv := claudeArgs("claude", turn("--extra", "x=1"))
	if n := len(argv); n < 3 || argv[0] != "claude" || argv[n-2] != "--extra" || argv[n-1] != "x=1" {
		t.Errorf("argv %q does not end with the profile's args", argv)
	}
	var p Provider
	if p.key(turn("--extra", "x=1"), "claude") == p.key(turn("--extra", "x=2"), "claude") {
		t.Error("changed args keep the same runtime")
	}
	if first, again := p.key(turn(), "claude"), p.key(turn(), "claude"); first != again {
		t.Error("the same settings give two keys")
	}
	other := turn()
	other.Model = "m2" // a turn's own model
	var claude Provider
	if claude.key(turn(), "claude") == claude.key(other, "claude") || !slices.Contains(claudeArgs("claude", other), "m2") {
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
