package activation

import "os"

// EnvTrampoline carries the target path to the exec trampoline.
const EnvTrampoline = "DEEPCODE_TRAMPOLINE_EXEC"

// RunTrampoline must be the first call in the supervisor's main. When the
// supervisor re-executes itself as a trampoline, it sets LISTEN_PID to its
// own pid, which the service keeps across exec, and becomes the service, as
// systemd-socket-activate does: os/exec cannot know a child's pid before it
// exists, and go-systemd's activation requires LISTEN_PID to match.
func RunTrampoline() {
	target := os.Getenv(EnvTrampoline)
	if target == "" {
		return
	}
	os.Exit(execTrampoline(target))
}
