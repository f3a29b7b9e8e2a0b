//go:build !windows && !linux

package native

import "syscall"

// setParentDeathSignal: only Linux has a parent-death signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}
