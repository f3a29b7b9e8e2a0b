package wine

import (
	"os"
	"runtime"
	"testing"
)

// Under .ci/wine (which sets DEEPCODE_WINE_EXPECTED=1) Wine must be
// detected, and never outside it: a detection that always says no would
// make the Wine-only skips run, one that always says yes would hide tests on
// Windows.
func TestRunningMatchesTheEnvironment(t *testing.T) {
	want := os.Getenv("DEEPCODE_WINE_EXPECTED") == "1"
	if runtime.GOOS != "windows" && want {
		t.Fatal("DEEPCODE_WINE_EXPECTED is set outside Windows")
	}
	if got := Running(); got != want {
		t.Fatalf("Running() = %v (version %q), want %v", got, Version(), want)
	}
	if Running() {
		t.Logf("Wine %s", Version())
	}
}
