package activation

import (
	"net"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// bindSocket binds a Unix spec on Windows: the services listen on named
// pipes, so the spec's socket path only names the pipe (SocketPipe), created
// by ListenPipe as the first instance and open to the current user only.
func bindSocket(path string) (net.Listener, error) {
	dbID, name, err := socketPipeParts(path)
	if err != nil {
		return nil, err
	}
	return ListenPipe(dbID, name)
}

// Windows services listen on named pipes (bindSocket); Unix sockets are not
// used there.
func listenUnixPrivate(string) (net.Listener, error) {
	return nil, errs.New(errs.NotImplemented, "Unix sockets are not used on Windows: named pipes are")
}
