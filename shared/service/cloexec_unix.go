//go:build !windows

package service

import "syscall"

func setCloseOnExec(fd int) { syscall.CloseOnExec(fd) }

func setNonblock(fd int) { _ = syscall.SetNonblock(fd, true) }
