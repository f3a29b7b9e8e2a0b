package paths

import (
	"os"
	"path/filepath"
)

// On Windows the sockets are named pipes; this folder holds nothing secret.
func fallbackBase() string {
	return filepath.Join(os.TempDir(), "deepcode")
}

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".deepcode-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// checkPrivateDir is a no-op: Windows pipes carry their own ACL.
func checkPrivateDir(string) error { return nil }

func checkSessionDir(string) error { return nil }
