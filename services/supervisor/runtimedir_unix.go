//go:build !windows

package supervisor

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/paths"
)

// sweepAge is how long a runtime folder must have been left unchanged before
// the sweep may remove it: a starting instance creates its folder and binds
// its sockets within moments, so a folder that old is not being set up.
const sweepAge = time.Minute

// removeRuntimeDir removes this instance's socket folder once its sockets
// are gone (a clean stop): os.Remove leaves a folder that still holds
// anything, such as the sockets launchd or systemd own.
func (s *Supervisor) removeRuntimeDir() {
	_ = os.Remove(s.layout.RuntimeDir)
}

// sweepRuntimeDirs removes the socket folders of other databases' instances
// that are gone: a folder named like a database id that has been unchanged
// for sweepAge and holds nothing but sockets nobody listens on (an instance
// that was killed, or a machine that crashed, leaves those). A socket that
// answers, or anything that is not a socket, keeps the folder.
func (s *Supervisor) sweepRuntimeDirs() {
	base := filepath.Dir(s.layout.RuntimeDir)
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || name == s.layout.DBID || len(name) != len(s.layout.DBID) || !paths.ValidDatabaseID(name) {
			continue
		}
		dir := filepath.Join(base, name)
		if gone(dir) {
			s.log.Info("removed the socket folder of an instance that is gone", "folder", dir)
		}
	}
}

// gone removes dir if its instance is gone, and reports whether it did.
func gone(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < sweepAge {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	var dead []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.Type()&os.ModeSocket == 0 || !refuses(p) {
			return false
		}
		dead = append(dead, p)
	}
	for _, p := range dead {
		_ = os.Remove(p)
	}
	return os.Remove(dir) == nil
}

// refuses reports whether nothing listens on the socket at p.
func refuses(p string) bool {
	c, err := net.DialTimeout("unix", p, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
