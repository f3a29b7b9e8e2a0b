package localauth

import (
	"net"

	"golang.org/x/sys/unix"
)

// getpeereid is LOCAL_PEERCRED's xucred on Darwin.
func peerCredentials(c *net.UnixConn) PeerInfo {
	raw, err := c.SyscallConn()
	if err != nil {
		return PeerInfo{UID: -1, Err: err}
	}
	var cred *unix.Xucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return PeerInfo{UID: -1, Err: err}
	}
	if credErr != nil {
		return PeerInfo{UID: -1, Err: credErr}
	}
	return PeerInfo{UID: int(cred.Uid)}
}
