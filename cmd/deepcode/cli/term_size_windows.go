package cli

import (
	"os"

	"golang.org/x/sys/windows"
)

// windowSize is the size of the console window of fd, if it is one.
func windowSize(fd uintptr) (cols, rows int, ok bool) {
	var info windows.ConsoleScreenBufferInfo
	if err := windows.GetConsoleScreenBufferInfo(windows.Handle(fd), &info); err != nil {
		return 0, 0, false
	}
	cols = int(info.Window.Right-info.Window.Left) + 1
	rows = int(info.Window.Bottom-info.Window.Top) + 1
	return cols, rows, cols > 0 && rows > 0
}

// notifyResize: a console has no SIGWINCH; attach polls the size instead.
func notifyResize(chan<- os.Signal) (stop func()) { return func() {} }
