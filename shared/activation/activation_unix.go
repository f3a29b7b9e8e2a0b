//go:build !windows

package activation

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// listenUnixPrivate binds with a umask that makes the socket 0600 from its
// first instant (chmod after bind would leave a window).
func listenUnixPrivate(path string) (net.Listener, error) {
	ln, err := listenWithUmask(path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

func listenWithUmask(path string) (net.Listener, error) {
	// The umask is process-wide; binds happen at start-up, before other
	// goroutines create files.
	old := unix.Umask(0o177)
	defer unix.Umask(old)
	return net.Listen("unix", path)
}
