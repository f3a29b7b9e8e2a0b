package termhost

import (
	"errors"
	"os"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// startError says why a terminal's program did not start.
func startError(name string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errs.Wrap(err, errs.NotFound, "cannot run %s: no such file", name)
	case errors.Is(err, os.ErrPermission):
		return errs.Wrap(err, errs.Forbidden, "cannot run %s: permission denied", name)
	}
	return errs.Wrap(err, errs.InvalidParams, "cannot run %s", name)
}
