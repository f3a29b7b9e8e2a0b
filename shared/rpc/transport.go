package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/gobwas/ws"
)

// Upgrade turns an HTTP request into a server-side WSConn. Callers check
// Host, Origin and credentials before calling it: the upgrader has no hooks.
func Upgrade(w http.ResponseWriter, r *http.Request, opts ConnOptions) (*WSConn, error) {
	opts.fill()
	nc, rw, _, err := ws.HTTPUpgrader{Timeout: opts.WriteTimeout}.Upgrade(r, w)
	if err != nil {
		return nil, err
	}
	var br *bufio.Reader
	if rw != nil {
		br = rw.Reader
	}
	return NewWSConn(nc, br, false, opts), nil
}

// DialOptions say where and how to open a client WebSocket.
type DialOptions struct {
	// Network is "unix" or "tcp"; Address the socket path or host:port.
	Network, Address string
	// Path is the HTTP path of the RPC endpoint, e.g. "/rpc".
	Path string
	// Host is the Host header; default "localhost" for Unix sockets and the
	// address for TCP.
	Host   string
	Header http.Header
	// Timeout bounds the dial and handshake; default 5 s.
	Timeout time.Duration
	Conn    ConnOptions
}

// Dial opens a client WebSocket. A refused handshake returns the service's
// own error (e.g. UNAUTHORIZED) when its body carries one.
func Dial(ctx context.Context, opts DialOptions) (*WSConn, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	host := opts.Host
	if host == "" {
		host = "localhost"
		if opts.Network == "tcp" {
			host = opts.Address
		}
	}
	var refusal *errs.Error
	d := ws.Dialer{
		Timeout: opts.Timeout,
		Header:  ws.HandshakeHeaderHTTP(opts.Header),
		NetDial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return activation.Dial(ctx, opts.Network, opts.Address) // a named pipe on Windows
		},
		OnStatusError: func(status int, _ []byte, resp io.Reader) {
			body, _ := io.ReadAll(io.LimitReader(resp, 64<<10))
			if i := bytes.Index(body, []byte("\r\n\r\n")); i >= 0 {
				body = body[i+4:]
			}
			refusal = ParseHTTPError(status, body)
		},
	}
	path := opts.Path
	if path == "" {
		path = "/"
	}
	nc, br, _, err := d.Dial(ctx, "ws://"+host+path)
	if err != nil {
		if refusal != nil {
			return nil, refusal
		}
		var se ws.StatusError
		if errors.As(err, &se) {
			return nil, errs.Wrap(err, errs.ServiceUnavailable, "the service refused the WebSocket (HTTP %d)", int(se))
		}
		return nil, errs.Wrap(err, errs.ServiceUnavailable, "cannot connect to %s", opts.Address)
	}
	return NewWSConn(nc, br, true, opts.Conn), nil
}
