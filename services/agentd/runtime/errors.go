package runtime

import (
	"errors"
	"io/fs"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// StartProblem says why a command did not start, without internals.
func StartProblem(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "the program does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "the program is not executable"
	}
	return "see the service log"
}

// Crash is the error of a turn whose runtime exited or stopped answering
// (WORKER_CRASHED), with how the process ended when it did.
func Crash(p *Proc, cause error) error {
	select {
	case <-p.done:
		return errs.Wrap(cause, errs.WorkerCrashed, "the %s runtime exited during the turn (%s)", p.name, p.ExitProblem())
	case <-time.After(200 * time.Millisecond): // a failed write may precede the exit
	}
	return errs.Wrap(cause, errs.WorkerCrashed, "lost the connection to the %s runtime", p.name)
}

// StartErr is a runtime that failed while starting.
func StartErr(p *Proc, err error) error {
	if e, ok := errs.As(err); ok && e.Code != errs.WorkerCrashed {
		return err
	}
	select {
	case <-p.done:
		return errs.Wrap(err, errs.ProviderUnavailable, "the %s runtime exited while starting (%s)", p.name, p.ExitProblem())
	default:
	}
	return errs.Wrap(err, errs.ProviderUnavailable, "the %s runtime did not start", p.name)
}
