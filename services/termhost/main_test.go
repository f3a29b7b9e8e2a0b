package termhost_test

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) { testkit.Main(m) }
