package cli

import (
	"os"

	"github.com/deepcode-dev/deepcode/launchd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// newServiceManager on macOS is the LaunchAgent manager
// (svcmgr_launchd.go) in the user's GUI login domain, gui/<uid>.
func newServiceManager(l *paths.Layout) (serviceManager, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot find your home folder: set HOME")
	}
	ch, err := os.UserConfigDir() // ~/Library/Application Support
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "cannot find your configuration folder: set HOME")
	}
	return &launchdManager{layout: l, userHome: home, configHome: ch, ctl: &launchd.Launchctl{UID: os.Getuid()}}, nil
}
