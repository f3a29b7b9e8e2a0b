//go:build !linux

package agentd

import "os"

// syncFiles makes files durable, one fsync each.
func syncFiles(files []*os.File) error {
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return nil
}
