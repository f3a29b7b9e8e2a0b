package agentd_test

import (
	"os"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestMain removes the binaries the tests built. Started with
// FAKE_OPENCODE_MODE set (as a runtime, by agentd), the test binary is a
// fake opencode server instead (fakeopencode_test.go).
func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeOpencodeEnv); mode != "" {
		os.Exit(runFakeOpencode(mode))
	}
	testkit.Main(m)
}
