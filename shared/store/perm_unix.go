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
