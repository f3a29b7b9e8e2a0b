package manager

import "github.com/deepcode-dev/deepcode/shared/errs"

func terminate(int) error {
	return errs.New(errs.NotImplemented, "stopping a supervised instance on Windows goes through Task Scheduler")
}
