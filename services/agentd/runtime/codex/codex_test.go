package codex

import (
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime/runtimetest"
)

// TestArgs: a profile's extra arguments end the runtime's command line, and
// a change of them (or of the model) is a new runtime: the pool key
// differs.
func TestArgs(t *testing.T) {
	var p Provider
	runtimetest.CheckArgs(t, "codex", codexArgs, p.key)
}
