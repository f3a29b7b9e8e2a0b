//go:build !windows

package activation

import (
	"context"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// bindSocket binds a Unix spec: the socket file at path.
func bindSocket(path string) (net.Listener, error) { return BindUnix(path) }

// Dial connects to a service's socket: network "unix" and a socket path (a
// Layout.Socket path or an instance.json socket), or "tcp" and host:port.
// On Windows a "unix" address is reached as its named pipe (SocketPipe):
// every client of a service socket dials through here.
func Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

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
