//go:build !linux && !windows

package agentd

import "syscall"

func setParentDeathSignal(*syscall.SysProcAttr) {}
