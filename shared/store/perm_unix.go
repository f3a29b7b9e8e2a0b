//go:build unix

package store

import "golang.org/x/sys/unix"

// dirWritable reports whether this process may create files in dir.
func dirWritable(dir string) error {
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

// fileReadWritable reports whether this process may read and write path.
func fileReadWritable(path string) error {
	return unix.Access(path, unix.R_OK|unix.W_OK)
}

// freeBytes is the space left to this process on dir's filesystem.
func freeBytes(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

// readOnlyFS reports whether dir's filesystem is mounted read-only
// (access(2) says EROFS).
func readOnlyFS(dir string) bool {
	return unix.Access(dir, unix.W_OK) == unix.EROFS
}
