package supervisor_test

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes this process a child subreaper until the test ends,
// then reaps whatever was reparented to it.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a child subreaper: %v", err)
	}
	t.Cleanup(func() {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		// Registered before the Env, so this runs after its KillAll: every
		// reparented process is dead or dying; reap each.
		for pid := range children() {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	})
}

// children lists this process's child processes (live or zombie) and their
// state. The tests' own commands are always waited for, so every entry is a
// process reparented here.
func children() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, _, _ := procStat(pid); st != "" && ppid == me {
			out[pid] = st
		}
	}
	return out
}
