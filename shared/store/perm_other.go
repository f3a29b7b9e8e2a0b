//go:build !unix

package store

import "os"

// dirWritable reports whether this process may create files in dir, by
// creating and removing a probe file (ACLs make mode bits meaningless here).
func dirWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".deepcode-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// fileReadWritable reports whether this process may read and write path.
func fileReadWritable(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// freeBytes is unknown here (STORAGE_FULL then says "unknown space").
func freeBytes(string) (uint64, bool) { return 0, false }

// readOnlyFS is unknown here: false.
func readOnlyFS(string) bool { return false }
