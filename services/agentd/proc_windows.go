package agentd

import (
	"os"
	"os/exec"
)

func startInGroup(cmd *exec.Cmd) error { return cmd.Start() }

func lockThreadForChild() (unlock func()) { return func() {} }

func terminateGroup(pid int, _ bool) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

// processAlive reports whether a process with that pid exists.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}
