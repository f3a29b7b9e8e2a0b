//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly && !windows

package cli

import "os"

func windowSize(uintptr) (cols, rows int, ok bool) { return 0, 0, false }

func notifyResize(chan<- os.Signal) (stop func()) { return func() {} }
