//go:build !windows

package manager

import "syscall"

func terminate(pid int) error { return syscall.Kill(pid, syscall.SIGTERM) }
