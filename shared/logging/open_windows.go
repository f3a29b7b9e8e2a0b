package logging

import (
	"os"

	"golang.org/x/sys/windows"
)

// openShared opens a log file for reading the way Tail and Follow need on
// Windows: os.Open shares a file for reading and writing but not for
// deletion, so a follower holding service.log would make lumberjack's rename
// at rotation (and its removal of old backups) fail with a sharing violation.
// FILE_SHARE_DELETE lets the file be renamed or removed while it is read.
func openShared(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}
