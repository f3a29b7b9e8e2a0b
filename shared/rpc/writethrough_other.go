//go:build !(linux || darwin)

package rpc

import (
	"net"
	"syscall"
)

// rawConnOf disables the write-through where it is not implemented: every
// frame goes through the writer goroutine.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (c *WSConn) attemptWrite(uintptr) bool {
	c.wt.n, c.wt.err = 0, nil
	return true
}
