package activation

import (
	"net"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Windows services listen on named pipes (see windows/); Unix sockets are
// not used there.
func listenUnixPrivate(path string) (net.Listener, error) {
	return nil, errs.New(errs.NotImplemented, "Unix sockets are not used on Windows: named pipes are")
}
