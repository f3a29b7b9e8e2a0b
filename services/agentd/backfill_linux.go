package agentd

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFiles makes files durable: one syncfs for the filesystem they are
// on (a backfill writes them by the hundred, and an fsync each costs a
// journal commit each).
func syncFiles(files []*os.File) error {
	if len(files) == 0 {
		return nil
	}
	return unix.Syncfs(int(files[0].Fd()))
}
