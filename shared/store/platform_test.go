package store

import (
	"runtime"

	"github.com/deepcode-dev/deepcode/shared/testkit/wine"
)

func isUnixLike() bool {
	return runtime.GOOS != "windows" && runtime.GOOS != "plan9" && runtime.GOOS != "js" && runtime.GOOS != "wasip1"
}

// wantJournal is the journal Open must choose here: WAL, except under Wine,
// whose VirtualAlloc2 refuses the placeholders the driver maps WAL's shared
// memory into (.ci/wine makes the driver go without them, as it does on
// Windows before 10 1803): there the rollback journal.
func wantJournal() string {
	if wine.Running() {
		return journalRollback
	}
	return journalWAL
}
