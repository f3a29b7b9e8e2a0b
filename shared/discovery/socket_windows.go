package discovery

import (
	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// socketAddress is where clients reach the socket file of l: on Windows the
// named pipe that stands for it (\\.\pipe\deepcode-<db-id>-<name>), which
// activation.Dial dials as it is.
func socketAddress(l *paths.Layout, file string) string {
	if p, err := activation.SocketPipe(l.Socket(file)); err == nil {
		return p
	}
	return l.Socket(file)
}
