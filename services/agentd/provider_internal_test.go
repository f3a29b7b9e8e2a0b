package agentd

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/config"
)

func TestNewFileAction(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "there.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{"there.txt", "update"},                        // relative to the workspace
		{filepath.Join(ws, "there.txt"), "update"},     // absolute
		{"new.txt", "add"},                             // not there yet
		{filepath.Join(t.TempDir(), "new.txt"), "add"}, // outside the workspace
	} {
		if got := newFileAction(c.path, ws); got != c.want {
			t.Errorf("newFileAction(%q) = %q, want %q", c.path, got, c.want)
		}
	}
	if got := claudeFileAction("Edit", "new.txt", ws); got != "update" {
		t.Errorf("claude Edit of a missing file = %q, want update", got)
	}
	if got := claudeFileAction("Write", "new.txt", ws); got != "add" {
		t.Errorf("claude Write of a new file = %q, want add", got)
	}
}

// TestRuntimeArgs: a profile's extra arguments end each runtime's command
// line, and a change of them (or of the model) is a new runtime: the pool
// key differs.
func TestRuntimeArgs(t *testing.T) {
	turn := func(args ...string) *TurnRun {
		return &TurnRun{ProfileName: "p", Workspace: "/w", Profile: config.Profile{Model: "m1", BaseURL: "http://127.0.0.1:1/v1", Args: args}}
	}
	for _, c := range []struct {
		name string
		argv func(*TurnRun) []string
		key  func(*TurnRun) string
	}{
		{"codex", func(t *TurnRun) []string { return codexArgs("codex", t) }, func(t *TurnRun) string { return codexProvider{}.key(t, "codex") }},
		{"claude", func(t *TurnRun) []string { return claudeArgs("claude", t) }, func(t *TurnRun) string { return claudeProvider{}.key(t, "claude") }},
		{"opencode", func(t *TurnRun) []string { return opencodeArgs("opencode", t) }, func(t *TurnRun) string { return opencodeProvider{}.key(t, "opencode") }},
	} {
		argv := c.argv(turn("--extra", "x=1"))
		if n := len(argv); n < 3 || argv[0] != c.name || argv[n-2] != "--extra" || argv[n-1] != "x=1" {
			t.Errorf("%s: argv %q does not end with the profile's args", c.name, argv)
		}
		if c.key(turn("--extra", "x=1")) == c.key(turn("--extra", "x=2")) {
			t.Errorf("%s: changed args keep the same runtime", c.name)
		}
		if first, again := c.key(turn()), c.key(turn()); first != again {
			t.Errorf("%s: the same settings give two keys", c.name)
		}
	}
	other := turn()
	other.Model = "m2" // a turn's own model
	var claude claudeProvider
	if claude.key(turn(), "claude") == claude.key(other, "claude") || !slices.Contains(claudeArgs("claude", other), "m2") {
		t.Error("claude: a turn's own model does not reach the runtime")
	}
}
