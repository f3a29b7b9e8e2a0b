//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// execTUI replaces this process with the TUI binary at path, run with
// args; it returns only if that failed. The environment is this one's
// (deepcode links no bubbletea, so it never sets TERM aside: see package
// noquery, which deepcode-tui's TUI imports).
func execTUI(path string, args []string) (int, error) {
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return 0, err
}
