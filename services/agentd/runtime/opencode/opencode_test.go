package opencode

import (
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
	argv := opencodeArgs("opencode", turn("--extra", "x=1"))
	if n := len(argv); n < 3 || argv[0] != "opencode" || argv[n-2] != "--extra" || argv[n-1] != "x=1" {
		t.Errorf("argv %q does not end with the profile's args", argv)
	}
	var p Provider
	if p.key(turn("--extra", "x=1"), "opencode") == p.key(turn("--extra", "x=2"), "opencode") {
		t.Error("changed args keep the same runtime")
	}
	if first, again := p.key(turn(), "opencode"), p.key(turn(), "opencode"); first != again {
		t.Error("the same settings give two keys")
	}
}
