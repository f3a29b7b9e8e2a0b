//go:build !windows

package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"golang.org/x/sys/unix"
)

func fallbackBase() string {
	return filepath.Join("/tmp", fmt.Sprintf("deepcode-%d", os.Geteuid()))
}

func checkWritable(dir string) error {
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

// checkPrivateDir refuses a symlink, a folder owned by someone else or one
// that others can enter: sockets inside it would be reachable by them.
func checkPrivateDir(d string) error {
	fi, err := os.Lstat(d)
	if err != nil {
		return errs.Wrap(err, errs.RuntimeDirInsecure, "cannot inspect the runtime directory %s", d)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return errs.New(errs.RuntimeDirInsecure, "the runtime directory %s is not a plain folder: remove it and retry", d)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errs.New(errs.RuntimeDirInsecure, "cannot read the owner of %s", d)
	}
	if int(st.Uid) != os.Geteuid() {
		return errs.New(errs.RuntimeDirInsecure,
			"the runtime directory %s belongs to user %d, not to you (%d): remove it or set %s", d, st.Uid, os.Geteuid(), EnvRuntimeDir)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d, 0o700); err != nil {
			return errs.Wrap(err, errs.RuntimeDirInsecure, "the runtime directory %s is open to others (%v)", d, fi.Mode().Perm())
		}
	}
	return nil
}

// checkSessionDir refuses an $XDG_RUNTIME_DIR that is not a folder owned by
// this user with mode 0700 (what the XDG base directory spec requires).
func checkSessionDir(d string) error {
	fi, err := os.Stat(d)
	if err != nil {
		return errs.Wrap(err, errs.RuntimeDirInsecure, "XDG_RUNTIME_DIR=%s cannot be used: set it to your session's folder or set %s", d, EnvRuntimeDir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return errs.New(errs.RuntimeDirInsecure, "XDG_RUNTIME_DIR=%s is not a folder: set it to your session's folder or set %s", d, EnvRuntimeDir)
	}
	if int(st.Uid) != os.Geteuid() {
		return errs.New(errs.RuntimeDirInsecure,
			"XDG_RUNTIME_DIR=%s belongs to user %d, not to you (%d): set it to your own session's folder or set %s to a private folder", d, st.Uid, os.Geteuid(), EnvRuntimeDir)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return errs.New(errs.RuntimeDirInsecure,
			"XDG_RUNTIME_DIR=%s is open to others (mode %04o, must be 0700): run chmod 700 %s or set %s to a private folder", d, perm, d, EnvRuntimeDir)
	}
	return nil
}
