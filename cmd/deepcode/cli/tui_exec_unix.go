//go:build !windows

package cli

import (
	"os"
	"syscall"
)

// execTUI replaces this process with the TUI binary at path, run with
// args; it returns only if that failed. The environment is this one's:
// TERM is the real one again (noquery.go).
func execTUI(path string, args []string) (int, error) {
	err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
	return 0, err
}
