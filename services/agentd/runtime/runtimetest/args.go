// Package runtimetest holds checks the runtime providers' tests share.
package runtimetest

import (
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/config"
)

// Turn is a turn of profile "p" in /w with args as the profile's extra
// arguments.
func Turn(args ...string) *runtime.TurnRun {
	return &runtime.TurnRun{ProfileName: "p", Workspace: "/w", Profile: config.Profile{Model: "m1", BaseURL: "http://127.0.0.1:1/v1", Args: args}}
}

// CheckArgs: a profile's extra arguments end the runtime's command line
// (argv, for binary bin), and a change of them is a new runtime: the pool
// key differs, while the same settings give the same key.
func CheckArgs(t *testing.T, bin string, argv func(bin string, t *runtime.TurnRun) []string, key func(t *runtime.TurnRun, bin string) string) {
	t.Helper()
	a := argv(bin, Turn("--extra", "x=1"))
	if n := len(a); n < 3 || a[0] != bin || a[n-2] != "--extra" || a[n-1] != "x=1" {
		t.Errorf("argv %q does not end with the profile's args", a)
	}
	if key(Turn("--extra", "x=1"), bin) == key(Turn("--extra", "x=2"), bin) {
		t.Error("changed args keep the same runtime")
	}
	if first, again := key(Turn(), bin), key(Turn(), bin); first != again {
		t.Error("the same settings give two keys")
	}
}
