//go:build unix

package client

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports, without waiting, whether the service has closed an
// idle connection (or sent on it unasked, which makes it as unusable):
// a request written to it would be lost with no way to tell whether the
// service ran it.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n > 0 || rerr == nil || !(errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR))
		return true // never wait for the descriptor
	})
	return closed || err != nil
}
