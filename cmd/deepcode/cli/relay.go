package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/spf13/cobra"
)

// Bounds of the relay.
const (
	// relayMaxLine bounds one line on stdin: the gateway's own message
	// limit. A longer line is answered with REQUEST_TOO_LARGE and skipped.
	relayMaxLine = rpc.DefaultMaxMessage
	// relayDrainLimit is how long stdin's EOF waits for the answers to
	// requests already forwarded before the connection is closed.
	relayDrainLimit = 30 * time.Second
	// relayParentPoll is how often the relay checks that its parent lives.
	relayParentPoll = time.Second
)

func (a *app) relayCommand() *cobra.Command {
	var noStart bool
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Relay JSON-RPC between stdin/stdout and the service (for desktop apps)",
		Long: `Relay the business JSON-RPC protocol between stdin/stdout and the background
service, for desktop apps and editors that speak JSON-RPC over a child
process's pipes.

Each line on stdin is one JSON-RPC 2.0 object; each line on stdout is one
object from the service (responses and notifications such as thread.event),
in the order the service sent them. The client speaks the protocol itself,
starting with initialize (docs/PROTOCOL.md).

The relay verifies the instance's identity on manager.sock (the HMAC
challenge), then opens gateway.sock's business endpoint with that
credential; initialize's serviceInfo.instanceId must name the verified
instance. It starts the service through the normal start path if it is not
running (--no-start only attaches), and never runs anything itself.

A line that is not JSON is answered with a parse error (-32700), one that is
not a valid JSON-RPC object with an invalid-request error (-32600), one
longer than 1 MiB with REQUEST_TOO_LARGE; none of them reaches the service.
When the service cannot be reached, every request is answered with that
error (e.g. SERVICE_NOT_RUNNING) until EOF, and the exit status is 1. When
the connection is lost, requests still unanswered are answered with
CONNECTION_LOST (their outcome is unknown: read state before resending) and
the relay exits 1; start it again to reconnect.

EOF on stdin, the parent's exit, SIGINT or SIGTERM close only this client's
connection: turns go on in the service. At EOF every request read before it
is answered first (printf '<initialize>\n<request>\n' | deepcode relay prints
both answers), for at most 30 s; a request still unanswered then is answered
with CONNECTION_LOST. The exit status is then 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			a.quiet = true
			return a.relay(cmd.Context(), os.Stdin, a.stdout, noStart)
		},
	}
	cmd.Flags().BoolVar(&noStart, "no-start", false, "only attach to a running service; do not start it")
	return cmd
}

// relayState is one relay run.
type relayState struct {
	a          *app
	out        io.Writer
	outMu      sync.Mutex
	outBroken  bool
	conn       *rpc.WSConn
	instanceID string

	mu       sync.Mutex
	inflight map[string]relayRequest // by the id's JSON literal
	drained  chan struct{}           // signalled when inflight empties
}

// write prints one JSON object as one line. A broken stdout (the parent
// went away) is remembered: the relay then closes.
func (r *relayState) write(b []byte) bool {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		buf.Reset()
		buf.Write(b)
	}
	buf.WriteByte('\n')
	r.outMu.Lock()
	defer r.outMu.Unlock()
	if r.outBroken {
		return false
	}
	if _, err := r.out.Write(buf.Bytes()); err != nil {
		r.outBroken = true
		return false
	}
	return true
}

func (r *relayState) writeMsg(m *rpc.Message) bool {
	b, err := rpc.Encode(m)
	if err != nil {
		return false
	}
	return r.write(b)
}

func (r *relayState) track(id *rpc.ID, method string) {
	r.mu.Lock()
	r.inflight[id.String()] = relayRequest{id: id, method: method}
	r.mu.Unlock()
}

// deliver writes one message from the service to stdout. A response settles
// its request only once it is written, and under r.mu: drain (EOF on stdin)
// cannot let the relay exit between the two, and failPending cannot answer
// a request the service has answered. The answer to initialize must come
// from the verified instance; if not, the error is written instead and
// returned.
func (r *relayState) deliver(b []byte) error {
	m, derr := rpc.Decode(b)
	if derr != nil || !m.IsResponse() || m.ID == nil {
		if !r.write(b) {
			return errs.New(errs.ConnectionLost, "stdout is closed")
		}
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	req, tracked := r.inflight[m.ID.String()]
	var bad error
	if tracked && req.method == api.MethodInitialize && m.Error == nil {
		bad = r.checkInstance(m)
	}
	ok := false
	if bad != nil {
		ok = r.writeMsg(rpc.NewError(m.ID, bad))
	} else {
		ok = r.write(b)
	}
	if tracked {
		delete(r.inflight, m.ID.String())
		if len(r.inflight) == 0 {
			select {
			case r.drained <- struct{}{}:
			default:
			}
		}
	}
	if bad != nil {
		return bad
	}
	if !ok {
		return errs.New(errs.ConnectionLost, "stdout is closed")
	}
	return nil
}

func (r *relayState) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// failPending answers every unanswered request with err.
func (r *relayState) failPending(err error) {
	r.mu.Lock()
	reqs := make([]relayRequest, 0, len(r.inflight))
	for _, req := range r.inflight {
		reqs = append(reqs, req)
	}
	clear(r.inflight)
	r.mu.Unlock()
	for _, req := range reqs {
		r.writeMsg(rpc.NewError(req.id, err))
	}
}

// relayRequest is a request forwarded and not answered yet.
type relayRequest struct {
	id     *rpc.ID
	method string
}

// stdinLine is one line read from stdin, or why reading stopped.
type stdinLine struct {
	data    []byte
	tooLong bool
	err     error
}

// readLines reads stdin line by line, bounding each line: a longer one is
// skipped to its end and reported as tooLong.
func readLines(in io.Reader, lines chan<- stdinLine, stop <-chan struct{}) {
	br := bufio.NewReaderSize(in, 64<<10)
	send := func(l stdinLine) bool {
		select {
		case lines <- l:
			return true
		case <-stop:
			return false
		}
	}
	for {
		var line []byte
		tooLong := false
		var err error
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			if !tooLong {
				if len(line)+len(chunk) > relayMaxLine+1 { // +1: the newline
					tooLong, line = true, nil
				} else {
					line = append(line, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			break
		}
		if tooLong {
			if !send(stdinLine{tooLong: true}) {
				return
			}
		} else if len(bytes.TrimSpace(line)) > 0 {
			if !send(stdinLine{data: line}) {
				return
			}
		}
		if err != nil {
			send(stdinLine{err: err})
			return
		}
	}
}

// relay runs until EOF, the parent's exit, a signal or the connection's
// loss.
func (a *app) relay(ctx context.Context, in io.Reader, out io.Writer, noStart bool) error {
	signal.Ignore(syscall.SIGPIPE) // a gone parent: writes fail, the relay closes
	r := &relayState{a: a, out: out, inflight: map[string]relayRequest{}, drained: make(chan struct{}, 1)}
	lines := make(chan stdinLine)
	stop := make(chan struct{})
	defer close(stop)
	go readLines(in, lines, stop)

	connErr := r.connect(ctx, noStart)
	if connErr != nil {
		// Answer every request with the reason until EOF: a client that
		// waits for an answer gets one instead of hanging.
		fmt.Fprintf(a.stderr, "deepcode relay: %s (%s)\n", errs.From(connErr).Message, errs.CodeOf(connErr))
		for {
			select {
			case l := <-lines:
				if l.err != nil {
					return &exitError{code: exitFailure}
				}
				if m := r.decodeLine(l); m != nil && m.IsRequest() {
					r.writeMsg(rpc.NewError(m.ID, connErr))
				}
			case <-ctx.Done():
				return &exitError{code: exitFailure}
			}
		}
	}
	defer r.conn.Close(rpc.CloseNormal, "relay closed")

	gone := make(chan error, 1)
	go func() { gone <- r.pump() }()

	parent := os.Getppid()
	poll := time.NewTicker(relayParentPoll)
	defer poll.Stop()
	for {
		select {
		case l := <-lines:
			if l.err != nil {
				if !errors.Is(l.err, io.EOF) {
					fmt.Fprintf(a.stderr, "deepcode relay: reading stdin: %v\n", l.err)
				}
				return r.drain(gone)
			}
			m := r.decodeLine(l)
			if m == nil {
				continue
			}
			if m.IsRequest() {
				r.track(m.ID, m.Method)
			}
			if err := r.conn.WriteMessages([][]byte{bytes.TrimSpace(l.data)}); err != nil {
				return r.lost(err)
			}
		case err := <-gone:
			return r.lost(err)
		case <-poll.C:
			if os.Getppid() != parent {
				return nil // the parent exited: close this connection only
			}
			if r.broken() {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

func (r *relayState) broken() bool {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	return r.outBroken
}

// connect starts the service if needed (unless noStart) and opens the
// verified, uninitialized business connection.
func (r *relayState) connect(ctx context.Context, noStart bool) error {
	if !noStart {
		if err := r.a.ensureRunning(ctx); err != nil {
			return err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, id, err := client.DialBusiness(dctx, r.a.layout, client.BusinessOptions{})
	if err != nil {
		return err
	}
	r.conn, r.instanceID = conn, id
	return nil
}

// decodeLine validates a line from stdin; an invalid one is answered here
// and nil returned.
func (r *relayState) decodeLine(l stdinLine) *rpc.Message {
	if l.tooLong {
		r.writeMsg(rpc.NewError(nil, errs.New(errs.RequestTooLarge, "the line exceeds %d bytes; it was not sent", relayMaxLine)))
		return nil
	}
	m, err := rpc.Decode(l.data)
	if err != nil {
		var de *rpc.DecodeError
		if errors.As(err, &de) {
			r.writeMsg(de.Response())
		}
		return nil
	}
	return m
}

// pump copies the service's messages to stdout until the connection ends.
func (r *relayState) pump() error {
	for {
		b, err := r.conn.ReadMessage()
		if err != nil {
			return err
		}
		if err := r.deliver(b); err != nil {
			return err
		}
	}
}

// checkInstance: initialize must come from the verified instance.
func (r *relayState) checkInstance(m *rpc.Message) error {
	var res api.InitializeResult
	if json.Unmarshal(m.Result, &res) != nil || res.ServiceInfo == nil {
		return nil
	}
	if res.ServiceInfo.InstanceID != r.instanceID {
		return errs.New(errs.InstanceReplaced, "the gateway serves instance %s, not the verified %s", res.ServiceInfo.InstanceID, r.instanceID)
	}
	return nil
}

// drain waits (bounded by relayDrainLimit) for the answers to requests
// already forwarded; a request still unanswered then is answered with
// CONNECTION_LOST, so every request read before EOF gets an answer.
func (r *relayState) drain(gone <-chan error) error {
	if r.pending() == 0 {
		return nil
	}
	t := time.NewTimer(relayDrainLimit)
	defer t.Stop()
	for r.pending() > 0 {
		select {
		case <-r.drained:
		case err := <-gone:
			return r.lost(err)
		case <-t.C:
			r.failPending(errs.New(errs.ConnectionLost, "the relay closed at the end of its input before the service answered within %s; the outcome of this request is unknown: read state before resending", relayDrainLimit))
			return nil
		}
	}
	return nil
}

// lost answers the requests left unanswered and exits 1.
func (r *relayState) lost(err error) error {
	if r.broken() {
		return nil
	}
	e := errs.Wrap(err, errs.ConnectionLost, "the connection to the service was lost (%v); the outcome of this request is unknown: read state before resending", err)
	if ee, ok := errs.As(err); ok && ee.Code != errs.ConnectionLost {
		e = ee
	}
	r.failPending(e)
	fmt.Fprintf(r.a.stderr, "deepcode relay: %s (%s)\n", e.Message, e.Code)
	return &exitError{code: exitFailure}
}
