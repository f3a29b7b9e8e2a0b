package localauth

import (
	"net"

	"golang.org/x/sys/unix"
)

func peerCredentials(c *net.UnixConn) PeerInfo {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerInfo{UID: -1, Err: err}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerInfo{UID: -1, Err: err}
	}
	if credErr != nil {
		return PeerInfo{UID: -1, Err: credErr}
	}
	return PeerInfo{UID: int(cred.Uid), PID: int(cred.Pid)}
}
