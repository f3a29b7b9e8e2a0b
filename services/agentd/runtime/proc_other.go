//go:build !linux && !windows

package runtime

import "syscall"

func setParentDeathSignal(*syscall.SysProcAttr) {}
