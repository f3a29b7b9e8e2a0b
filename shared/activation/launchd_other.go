//go:build !darwin

package activation

import "os"

// Only macOS has launchd.
func launchActivateSocket(string) ([]*os.File, error) { return nil, errNotFromLaunchd }
