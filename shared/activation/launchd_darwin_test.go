package activation

import (
	"os"
	"testing"
)

// Run by hand on a Mac; a test process is not a launchd job, so launchd
// answers ESRCH and FromLaunchd reports nothing passed.
func TestLaunchActivateSocketOutsideLaunchd(t *testing.T) {
	if os.Getenv("XPC_SERVICE_NAME") != "" && os.Getenv("XPC_SERVICE_NAME") != "0" {
		t.Skip("running as a launchd job")
	}
	if _, err := launchActivateSocket("manager"); err != errNotFromLaunchd {
		t.Fatalf("launch_activate_socket outside launchd: %v", err)
	}
}
