//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// windowSize is the size of the terminal fd, if it is one.
func windowSize(fd uintptr) (cols, rows int, ok bool) {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}

// notifyResize delivers SIGWINCH on c until stop is called.
func notifyResize(c chan<- os.Signal) (stop func()) {
	signal.Notify(c, unix.SIGWINCH)
	return func() { signal.Stop(c) }
}
