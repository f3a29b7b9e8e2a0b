package cli

import (
	"errors"
	"os"
	"os/exec"
)

// execTUI runs the TUI binary at path with args as a child on this
// console (Windows has no exec) and returns its exit status once it has
// exited; an error only if it could not start. ctrl+c reaches the child
// as a key (its console is in raw mode) and this process as a signal that
// Main's signal context catches: nothing here ends the child.
func execTUI(path string, args []string) (int, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK, nil
	case errors.As(err, &ee):
		return ee.ExitCode(), nil
	}
	return exitFailure, nil
}
