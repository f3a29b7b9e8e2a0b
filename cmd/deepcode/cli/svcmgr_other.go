//go:build !linux && !darwin && !windows

package cli

import (
	"context"
	"runtime"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// newServiceManager: systems other than Linux (systemd), macOS (launchd)
// and Windows (Task Scheduler) have no login startup; install and uninstall
// answer NOT_IMPLEMENTED and nothing is ever installed. `service start`
// still runs the service under deepcode-supervisor.
func newServiceManager(*paths.Layout) (serviceManager, error) {
	return unsupportedManager{}, nil
}

type unsupportedManager struct{}

func (unsupportedManager) err() error {
	return errs.New(errs.NotImplemented, "service install is not available on %s (no supported service manager); start the service manually with `deepcode service start`", runtime.GOOS)
}

func (unsupportedManager) Name() string                         { return "none" }
func (m unsupportedManager) Installed() (*installRecord, error) { return nil, m.err() }
func (m unsupportedManager) Install(context.Context, installRecord) (installResult, error) {
	return installResult{}, m.err()
}
func (m unsupportedManager) Uninstall(context.Context, *installRecord) ([]string, error) {
	return nil, m.err()
}
func (m unsupportedManager) Start(context.Context, *installRecord) error { return m.err() }
func (m unsupportedManager) Stop(context.Context, *installRecord) error  { return m.err() }
func (unsupportedManager) Active(context.Context, *installRecord) (bool, error) {
	return false, nil
}
func (m unsupportedManager) Doctor(context.Context, *installRecord) []doctorCheck {
	return []doctorCheck{{Name: "manager", Status: checkFail, Detail: errs.From(m.err()).Message}}
}
