//go:build linux || darwin

package rpc

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConnOf returns the descriptor of a plain socket, for the write-through
// (WSConn.tryWriteText). Only the standard library's own socket types
// qualify: a wrapper's Write may do more than write.
func rawConnOf(nc net.Conn) syscall.RawConn {
	var rc syscall.RawConn
	var err error
	switch c := nc.(type) {
	case *net.UnixConn:
		rc, err = c.SyscallConn()
	case *net.TCPConn:
		rc, err = c.SyscallConn()
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	return rc
}

// attemptWrite is the write-through's one non-blocking system call: it
// writes what the socket takes now of c.wt.hdr and c.wt.body (both parts in
// one writev) and never waits. Called by RawConn.Write with wmu held.
func (c *WSConn) attemptWrite(fd uintptr) bool {
	c.wt.iov[0], c.wt.iov[1] = c.wt.hdr, c.wt.body
	for {
		n, err := unix.Writev(int(fd), c.wt.iov[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN || n < 0 {
			n, err = 0, nil // nothing taken: the writer goroutine waits for room
		}
		c.wt.n, c.wt.err = n, err
		break
	}
	c.wt.iov[0], c.wt.iov[1] = nil, nil
	return true // done: never wait for the socket here
}
