package activation

import (
	"context"
	"errors"
	"net"

	"github.com/Microsoft/go-winio"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"golang.org/x/sys/windows"
)

// CurrentUserSID is the SID of the user this process runs as.
func CurrentUserSID() (string, error) {
	tu, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return "", errs.Wrap(err, errs.StartFailed, "cannot read the current user's SID")
	}
	return tu.User.Sid.String(), nil
}

// ListenPipe listens on the pipe of socket name for database dbID, open to
// the current user only. go-winio creates the first pipe instance with
// FILE_CREATE, so when any process (a squatter, or a live instance) already
// holds the name, ListenPipe fails instead of sharing the name with it:
// ALREADY_RUNNING.
func ListenPipe(dbID, name string) (net.Listener, error) {
	path, err := PipeName(dbID, name)
	if err != nil {
		return nil, err
	}
	sid, err := CurrentUserSID()
	if err != nil {
		return nil, err
	}
	sddl, err := PipeSDDL(sid)
	if err != nil {
		return nil, err
	}
	ln, err := winio.ListenPipe(path, &winio.PipeConfig{
		SecurityDescriptor: sddl,
		InputBufferSize:    64 << 10,
		OutputBufferSize:   64 << 10,
	})
	if err != nil {
		if pipeTaken(err) {
			return nil, errs.Wrap(err, errs.AlreadyRunning, "another process holds the pipe %s", path)
		}
		return nil, errs.Wrap(err, errs.StartFailed, "cannot listen on %s", path)
	}
	closeFirstInstance(path)
	return ln, nil
}

// closeFirstInstance makes sure no client can ever connect to go-winio's
// first pipe instance, the one that holds the name and is never accepted on.
// Windows creates it disconnected, so this one attempt to open the pipe
// (before any Accept, without waiting) fails with ERROR_PIPE_BUSY and
// changes nothing. Wine creates it listening, so the first client would
// connect to it and wait forever (go-winio #173, #313): this attempt is that
// client, and closing it leaves the instance closed to everyone.
func closeFirstInstance(path string) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ|windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING, 0, 0)
	if err == nil {
		_ = windows.CloseHandle(h)
	}
}

// pipeTaken reports the errors of creating a first instance whose name
// exists: NTSTATUS OBJECT_NAME_COLLISION surfaces as ERROR_ALREADY_EXISTS,
// or ACCESS_DENIED when the holder's DACL excludes us, or PIPE_BUSY.
func pipeTaken(err error) bool {
	return errors.Is(err, windows.ERROR_ALREADY_EXISTS) || errors.Is(err, windows.ERROR_ACCESS_DENIED) ||
		errors.Is(err, windows.ERROR_PIPE_BUSY) || errors.Is(err, windows.ERROR_FILE_EXISTS)
}

// Dial connects to a service's socket: network "unix" and a socket path (a
// Layout.Socket path, dialled as its named pipe: SocketPipe) or a pipe name
// (instance.json records pipe names on Windows), or "tcp" and host:port.
// Every client of a service socket dials through here.
func Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if network != "unix" {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	path := address
	if !IsPipeName(path) {
		p, err := SocketPipe(address)
		if err != nil {
			return nil, err
		}
		path = p
	}
	return winio.DialPipeContext(ctx, path)
}

// DialPipe connects to the pipe of socket name for database dbID.
func DialPipe(ctx context.Context, dbID, name string) (net.Conn, error) {
	path, err := PipeName(dbID, name)
	if err != nil {
		return nil, err
	}
	return winio.DialPipeContext(ctx, path)
}
