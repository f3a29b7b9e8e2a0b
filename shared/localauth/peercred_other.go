//go:build !linux && !darwin

package localauth

import (
	"errors"
	"net"
)

// Windows uses named pipes with an ACL instead; other systems are refused.
func peerCredentials(*net.UnixConn) PeerInfo {
	return PeerInfo{UID: -1, Err: errors.New("peer credentials are not supported on this system")}
}
