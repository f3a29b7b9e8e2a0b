// Package client talks to a running instance's manager the way every native
// client must: it first proves that the server knows the instance's token
// (a fresh HMAC challenge, so an unrelated process on a stale port or socket
// never receives the credential), then sends the bearer bound to the
// verified instance id. Ambient HTTP proxy settings are ignored.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Transport selects how to reach the manager.
type Transport string

// Transports.
const (
	// Unix dials manager.sock (the default for the CLI); on Windows, the
	// named pipe that stands for it.
	Unix Transport = "unix"
	// TCP goes through the gateway's 127.0.0.1 port.
	TCP Transport = "tcp"
)

// Options configure Connect.
type Options struct {
	Transport Transport
	// Address overrides where to dial (a socket path or host:port).
	Address string
}

// Management is an authenticated management client.
type Management struct {
	layout     *paths.Layout
	network    string
	address    string
	host       string
	token      string
	instanceID string
	instance   *discovery.Instance
	mu         sync.Mutex // instanceID
	// idle holds verified connections between exchanges (at most
	// maxIdleConns), the one Connect made among them at first.
	idleMu sync.Mutex
	idle   []*verifiedConn
	closed bool
}

// maxIdleConns bounds the verified connections a client keeps open
// between exchanges.
const maxIdleConns = 2

// verifiedConn is a connection whose peer proved it knows the token, and
// the reader its answers are parsed from.
type verifiedConn struct {
	net.Conn
	br   *bufio.Reader
	used bool // it carried an exchange before: the service may have closed it since
}

// Connect verifies the identity of the instance serving l's database and
// returns a client bound to it. A missing or dead instance is
// SERVICE_NOT_RUNNING; a server that cannot prove knowledge of the token is
// IDENTITY_MISMATCH (and never saw the token).
func Connect(ctx context.Context, l *paths.Layout, opts Options) (*Management, error) {
	inst, err := discovery.ReadInstance(l)
	if err != nil {
		return nil, err
	}
	token, err := discovery.ReadToken(l)
	if err != nil {
		return nil, err
	}
	m := &Management{layout: l, token: token, instance: inst}
	switch opts.Transport {
	case "", Unix:
		m.network, m.address, m.host = "unix", inst.Sockets["manager"], "localhost"
		if m.address == "" {
			m.address = l.Socket(paths.ManagerSocket)
		}
	case TCP:
		m.network, m.address = "tcp", inst.Address
		if m.address == "" {
			return nil, errs.New(errs.ServiceNotRunning, "the instance has no TCP address yet")
		}
		m.host = m.address
	default:
		return nil, errs.New(errs.UsageError, "unknown transport %q", opts.Transport)
	}
	if opts.Address != "" {
		m.address = opts.Address
		if m.network == "tcp" {
			m.host = opts.Address
		}
	}
	// The first verified connection fixes the instance id and serves the
	// first request.
	conn, err := m.dialVerified(ctx)
	if err != nil {
		return nil, err
	}
	m.idle = append(m.idle, conn)
	return m, nil
}

// dialVerified opens a connection and runs the identity challenge on it
// before anything else is sent, so the bearer only ever travels on
// connections whose peer proved it knows the token — also when a new
// connection is needed after an idle one was closed.
func (m *Management) dialVerified(ctx context.Context) (*verifiedConn, error) {
	// manager.sock, or on Windows the named pipe standing for it.
	conn, err := activation.Dial(ctx, m.network, m.address)
	if err != nil {
		return nil, connError(err, m.address)
	}
	id, err := m.challenge(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.instanceID == "" {
		m.instanceID = id
	} else if id != m.instanceID {
		_ = conn.Close()
		return nil, errs.New(errs.InstanceReplaced,
			"instance %s now answers at %s instead of %s; the credential was not sent", id, m.address, m.instanceID).With("instanceId", id)
	}
	return &verifiedConn{Conn: conn, br: bufio.NewReader(conn)}, nil
}

// Close releases idle connections.
func (m *Management) Close() {
	m.idleMu.Lock()
	idle := m.idle
	m.idle, m.closed = nil, true
	m.idleMu.Unlock()
	for _, c := range idle {
		_ = c.Close()
	}
}

// conn takes an idle verified connection the service has not closed, or
// makes one.
func (m *Management) conn(ctx context.Context) (*verifiedConn, error) {
	for {
		m.idleMu.Lock()
		n := len(m.idle)
		if n == 0 {
			m.idleMu.Unlock()
			return m.dialVerified(ctx)
		}
		c := m.idle[n-1]
		m.idle = m.idle[:n-1]
		m.idleMu.Unlock()
		if c.br.Buffered() == 0 && !peerClosed(c.Conn) {
			return c, nil
		}
		_ = c.Close()
	}
}

// release keeps c for the next exchange, or closes it.
func (m *Management) release(c *verifiedConn) {
	m.idleMu.Lock()
	if !m.closed && len(m.idle) < maxIdleConns {
		m.idle = append(m.idle, c)
		c = nil
	}
	m.idleMu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// noAnswer is an exchange that failed before any byte of an answer
// arrived; written tells whether the request had been written whole.
type noAnswer struct {
	err     error
	written bool
}

func (e *noAnswer) Error() string { return e.err.Error() }
func (e *noAnswer) Unwrap() error { return e.err }

// roundTrip sends req on a verified connection and reads the answer's
// status and body (at most limit bytes). It is what net/http's client
// would do with one connection per exchange, without its transport's
// goroutines and buffers, which a command that makes one or two calls
// paid for at every start. Never a proxy (the credential does not leave
// for an ambient one) and never a redirect (an answer that redirects
// comes from something else; it is returned, not followed).
//
// A connection kept from an earlier exchange may have been closed by the
// service since (its idle timeout, a restart). The request is then sent
// again on a new connection, once, when that cannot run it twice: when
// it was not written at all, or when it is a GET, which changes nothing
// (net/http's rule for requests it may replay).
func (m *Management) roundTrip(req *http.Request, limit int64) (int, []byte, error) {
	ctx := req.Context()
	for retried := false; ; retried = true {
		c, err := m.conn(ctx)
		if err != nil {
			return 0, nil, err
		}
		reused := c.used
		c.used = true
		status, body, keep, err := c.exchange(ctx, req, limit)
		if err == nil {
			if keep {
				m.release(c)
			} else {
				_ = c.Close()
			}
			return status, body, nil
		}
		_ = c.Close()
		var na *noAnswer
		if retried || !reused || !errors.As(err, &na) || (na.written && req.Method != http.MethodGet) {
			return 0, nil, err
		}
		if req.GetBody != nil {
			b, gerr := req.GetBody()
			if gerr != nil {
				return 0, nil, err
			}
			req.Body = b
		}
	}
}

// exchangeWriteTimeout bounds writing a request when the context has no
// deadline.
const exchangeWriteTimeout = 10 * time.Second

// exchange writes req and reads its answer, within ctx. keep: the
// connection may carry another exchange.
func (c *verifiedConn) exchange(ctx context.Context, req *http.Request, limit int64) (status int, body []byte, keep bool, err error) {
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline {
		deadline = time.Now().Add(exchangeWriteTimeout)
	}
	_ = c.SetDeadline(deadline)
	// A cancelled context interrupts the exchange at once.
	interrupted := false
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer func() {
		if !stop() {
			interrupted = true
		}
		if interrupted {
			keep = false
		} else {
			_ = c.SetDeadline(time.Time{})
		}
	}()
	if err := req.Write(c.Conn); err != nil {
		return 0, nil, false, &noAnswer{err: err}
	}
	if !hasDeadline {
		// Only the write is bounded then: the answer may take as long as
		// the caller is willing to wait (WaitReady waits server side).
		_ = c.SetReadDeadline(time.Time{})
	}
	if _, err := c.br.Peek(1); err != nil {
		return 0, nil, false, &noAnswer{err: err, written: true}
	}
	resp, err := http.ReadResponse(c.br, req)
	if err != nil {
		return 0, nil, false, err
	}
	body, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	_ = resp.Body.Close()
	if err != nil {
		return 0, nil, false, err
	}
	if int64(len(body)) > limit {
		return 0, nil, false, fmt.Errorf("an answer of more than %d bytes", limit)
	}
	return resp.StatusCode, body, !resp.Close, nil
}

// InstanceID is the verified instance id.
func (m *Management) InstanceID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.instanceID
}

// Instance is the discovery record read at Connect.
func (m *Management) Instance() *discovery.Instance { return m.instance }

// Address is where the client talks to.
func (m *Management) Address() string { return m.address }

func (m *Management) url(path string, q url.Values) string {
	u := url.URL{Scheme: "http", Host: m.host, Path: path}
	if q != nil {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// challenge sends a fresh identity challenge on conn and checks the HMAC
// proof. Only then may the connection carry the credential.
func (m *Management) challenge(ctx context.Context, conn net.Conn) (string, error) {
	ch := localauth.NewChallenge()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url(mgmt.RouteIdentity, url.Values{"challenge": {ch}}), nil)
	if err != nil {
		return "", err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	// A cancelled context interrupts the exchange at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer func() {
		stop()
		_ = conn.SetDeadline(time.Time{})
	}()
	if err := req.Write(conn); err != nil {
		return "", connError(err, m.address)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return "", connError(err, m.address)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil {
		return "", connError(err, m.address)
	}
	if br.Buffered() > 0 {
		return "", errs.New(errs.IdentityMismatch, "the process at %s sent more than one answer; no credential was sent", m.address)
	}
	var res mgmt.IdentityResult
	if err := m.decodeAnswer(req.URL.Path, resp.StatusCode, body, &res); err != nil {
		var answer *answerError
		if !errors.As(err, &answer) {
			return "", err
		}
		if e := answer.err; e.Code == errs.ServiceNotRunning || e.Code == errs.ServiceUnavailable {
			return "", e
		}
		return "", errs.Wrap(answer.err, errs.IdentityMismatch,
			"the process at %s did not identify as this deepcode instance (%s); no credential was sent", m.address, answer.err.Message)
	}
	if res.InstanceID == "" || !localauth.VerifyProof(m.token, res.InstanceID, ch, res.Proof) {
		return "", errs.New(errs.IdentityMismatch,
			"the process at %s could not prove it is the deepcode instance for %s; no credential was sent", m.address, m.layout.Database)
	}
	return res.InstanceID, nil
}

// answerError is an error answer from whatever listens at the address, as
// opposed to a failure to get an answer at all.
type answerError struct{ err *errs.Error }

func (a *answerError) Error() string { return a.err.Error() }
func (a *answerError) Unwrap() error { return a.err }

// do sends req and decodes a JSON body; HTTP errors become the service's
// error object (wrapped in *answerError). An answer that is not a deepcode
// error object comes from some other program: IDENTITY_MISMATCH.
func (m *Management) do(req *http.Request, out any) error {
	status, body, err := m.roundTrip(req, 8<<20)
	if err != nil {
		if e, ok := errs.As(err); ok {
			return e // from dialVerified
		}
		return connError(err, m.address)
	}
	return m.decodeAnswer(req.URL.Path, status, body, out)
}

// decodeAnswer decodes a JSON answer, or turns an error answer into the
// service's error (wrapped in *answerError).
func (m *Management) decodeAnswer(path string, status int, body []byte, out any) error {
	if status != http.StatusOK {
		if status == http.StatusServiceUnavailable && path == mgmt.RouteReady {
			return json.Unmarshal(body, out)
		}
		if !isErrorObject(body) {
			return &answerError{errs.New(errs.IdentityMismatch, "%s answered HTTP %d, which is not a deepcode answer", m.address, status)}
		}
		return &answerError{rpc.ParseHTTPError(status, body)}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return &answerError{errs.Wrap(err, errs.IdentityMismatch, "unexpected answer from %s", m.address)}
	}
	return nil
}

// isErrorObject reports a deepcode error body: {"error":{"code":"…",…}}.
func isErrorObject(body []byte) bool {
	var env struct {
		Error *struct {
			Code errs.Code `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &env) == nil && env.Error != nil && env.Error.Code != ""
}

// connError classifies a transport failure.
func connError(err error, addr string) error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT) {
		return errs.Wrap(err, errs.ServiceNotRunning, "no deepcode service is listening at %s", addr)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return errs.Wrap(err, errs.DaemonTimeout, "no answer from %s in time", addr)
	}
	return errs.Wrap(err, errs.ServiceUnavailable, "cannot reach %s", addr)
}

// Call invokes a management method over POST /control/rpc.
func (m *Management) Call(ctx context.Context, method string, params, result any) error {
	req, err := rpc.NewRequest(rpc.NumberID(1), method, params)
	if err != nil {
		return errs.Wrap(err, errs.InvalidParams, "bad params for %s", method)
	}
	body, err := rpc.Encode(req)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url(mgmt.RouteRPC, nil), bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+m.token)
	hreq.Header.Set(localauth.HeaderInstance, m.instanceID)
	status, data, err := m.roundTrip(hreq, 16<<20)
	if err != nil {
		if e, ok := errs.As(err); ok {
			return e // from dialVerified: nothing was sent
		}
		var na *noAnswer
		if errors.As(err, &na) && !na.written {
			return errs.Wrap(err, errs.ConnectionLost, "the connection to %s broke before %s was sent", m.address, method)
		}
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return errs.Wrap(err, errs.DaemonTimeout, "no answer to %s in time; its outcome is unknown", method)
		}
		return errs.Wrap(err, errs.ConnectionLost, "the connection to %s broke during %s; its outcome is unknown", m.address, method)
	}
	if status != http.StatusOK {
		return rpc.ParseHTTPError(status, data)
	}
	msg, err := rpc.Decode(data)
	if err != nil || !msg.IsResponse() {
		return errs.New(errs.Internal, "malformed answer to %s", method)
	}
	if msg.Error != nil {
		return msg.Error.Err()
	}
	if result != nil {
		if err := json.Unmarshal(msg.Result, result); err != nil {
			return errs.Wrap(err, errs.Internal, "unexpected answer to %s", method)
		}
	}
	return nil
}

// Status calls status.
func (m *Management) Status(ctx context.Context) (mgmt.Status, error) {
	var st mgmt.Status
	err := m.Call(ctx, mgmt.MethodStatus, nil, &st)
	return st, err
}

// WaitReady waits (server side, up to wait) for the instance to be ready.
func (m *Management) WaitReady(ctx context.Context, wait time.Duration) (mgmt.ReadyResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url(mgmt.RouteReady, url.Values{"wait": {wait.String()}}), nil)
	if err != nil {
		return mgmt.ReadyResult{}, err
	}
	var res mgmt.ReadyResult
	if err := m.do(req, &res); err != nil {
		return res, err
	}
	if !res.Ready {
		if res.Phase == mgmt.PhaseStopping {
			return res, errs.New(errs.ServiceUnavailable, "the instance is stopping").With("phase", res.Phase)
		}
		return res, errs.New(errs.StartTimeout, "the instance is not ready (phase %s)", res.Phase)
	}
	return res, nil
}

// String describes the client for messages.
func (m *Management) String() string {
	return fmt.Sprintf("instance %s at %s", m.instanceID, m.address)
}
