package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sort"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/gobwas/ws"
)

// Request is an incoming call or notification as a handler sees it.
type Request struct {
	Method string
	Params json.RawMessage
	// ID is nil for a notification.
	ID *ID
	// Peer is the connection the request arrived on; nil over plain HTTP.
	Peer *Peer

	closeAfter *CloseError
}

// CloseAfterReply closes the connection once this request's answer is
// written (the "shutdown" method closes only its own connection).
func (r *Request) CloseAfterReply(code ws.StatusCode, reason string) {
	r.closeAfter = &CloseError{Code: code, Reason: reason}
}

// Handler serves requests. The returned value is marshalled as the result;
// an error becomes a JSON-RPC error through the errs table. Results of
// notifications are discarded.
type Handler interface {
	ServeRPC(ctx context.Context, req *Request) (any, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) (any, error)

// ServeRPC implements Handler.
func (f HandlerFunc) ServeRPC(ctx context.Context, req *Request) (any, error) { return f(ctx, req) }

// Mux routes by exact method name.
type Mux struct {
	methods map[string]Handler
	inline  map[string]bool
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{methods: map[string]Handler{}} }

// Handle registers h for method. Registering a name twice is a programming
// error.
func (m *Mux) Handle(method string, h Handler) {
	if _, dup := m.methods[method]; dup {
		panic("rpc: method registered twice: " + method)
	}
	m.methods[method] = h
}

// HandleInline registers h for method like Handle, and lets the Peer
// serving this Mux run it on its reader goroutine when no other handler is
// running or queued on that peer (the answer then needs no hand-off to
// the dispatcher goroutine). Order is kept: requests still run one at a
// time in arrival order. h must be quick and must never wait: not for I/O,
// not for a lock held across I/O, and never for an answer from the peer it
// serves (the reader that would read that answer is running h). A wrapper
// around the Mux (such as a service's drain gate) keeps the mark by
// implementing Inliner itself.
func (m *Mux) HandleInline(method string, h Handler) {
	m.Handle(method, h)
	if m.inline == nil {
		m.inline = map[string]bool{}
	}
	m.inline[method] = true
}

// Inline implements Inliner: whether method was registered with
// HandleInline.
func (m *Mux) Inline(method string) bool { return m.inline[method] }

// Inliner is a Handler that names the methods a Peer may serve on its
// reader goroutine (see Mux.HandleInline).
type Inliner interface {
	Inline(method string) bool
}

// IsInline reports whether h marks method as inline: a wrapper of h uses it
// to implement Inliner.
func IsInline(h Handler, method string) bool {
	il, ok := h.(Inliner)
	return ok && il.Inline(method)
}

// HandleFunc registers a function.
func (m *Mux) HandleFunc(method string, f func(ctx context.Context, req *Request) (any, error)) {
	m.Handle(method, HandlerFunc(f))
}

// Has reports whether method is registered.
func (m *Mux) Has(method string) bool { _, ok := m.methods[method]; return ok }

// Methods lists the registered names, sorted.
func (m *Mux) Methods() []string {
	out := make([]string, 0, len(m.methods))
	for k := range m.methods {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ServeRPC implements Handler.
func (m *Mux) ServeRPC(ctx context.Context, req *Request) (any, error) {
	h, ok := m.methods[req.Method]
	if !ok {
		return nil, errs.New(errs.MethodNotFound, "unknown method %q", req.Method)
	}
	return h.ServeRPC(ctx, req)
}

// Method adapts a typed function: params are decoded strictly into P
// (unknown fields are INVALID_PARAMS) and R is the result.
func Method[P any, R any](fn func(ctx context.Context, params P) (R, error)) Handler {
	return typedHandler[P, R](fn)
}

type typedHandler[P any, R any] func(ctx context.Context, params P) (R, error)

func (h typedHandler[P, R]) ServeRPC(ctx context.Context, req *Request) (any, error) {
	var p P
	if err := BindParams(req.Params, &p); err != nil {
		return nil, err
	}
	return h(ctx, p)
}

// WireTypes implements Typed.
func (typedHandler[P, R]) WireTypes() (params, result reflect.Type) {
	return reflect.TypeFor[P](), reflect.TypeFor[R]()
}

// Typed is a handler that declares the types of its params and result
// (every handler made by Method): the contract's registry tests compare
// them with the contract.
type Typed interface {
	WireTypes() (params, result reflect.Type)
}

// Handler returns the handler registered for method, or nil.
func (m *Mux) Handler(method string) Handler { return m.methods[method] }

// BindParams decodes params into v, rejecting unknown fields and trailing
// data. Missing params decode as an empty object.
func BindParams(params json.RawMessage, v any) error {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.Wrap(err, errs.InvalidParams, "invalid params: %s", describeJSONError(err))
	}
	if dec.More() {
		return errs.New(errs.InvalidParams, "invalid params: trailing data")
	}
	return nil
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field != "" {
			return fmt.Sprintf("%s must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return fmt.Sprintf("expected %s, not %s", typeErr.Type, typeErr.Value)
	}
	return err.Error()
}

// Call runs h for one decoded request and builds its response, or nil for a
// notification. Panics in handlers become INTERNAL errors.
func Call(ctx context.Context, h Handler, req *Request, log *slog.Logger) (resp *Message) {
	defer func() {
		if r := recover(); r != nil {
			if log != nil {
				log.Error("rpc handler panicked", "method", req.Method, "panic", fmt.Sprint(r))
			}
			if req.ID != nil {
				resp = NewError(req.ID, errs.New(errs.Internal, "internal error"))
			} else {
				resp = nil
			}
		}
	}()
	result, err := h.ServeRPC(ctx, req)
	if req.ID == nil {
		if err != nil && log != nil {
			log.Debug("notification handler failed", "method", req.Method, "err", err)
		}
		return nil
	}
	if err != nil {
		if e := errs.From(err); e.Code == errs.Internal && log != nil {
			log.Error("rpc handler failed", "method", req.Method, "err", err)
		}
		return NewError(req.ID, err)
	}
	m, merr := NewResult(req.ID, result)
	if merr != nil {
		if log != nil {
			log.Error("rpc result not serialisable", "method", req.Method, "err", merr)
		}
		return NewError(req.ID, errs.New(errs.Internal, "internal error"))
	}
	return m
}

// DefaultMaxMessage is the per-message size limit on every socket (1 MiB).
const DefaultMaxMessage = 1 << 20

// ServeHTTP answers one JSON-RPC request carried in an HTTP POST body (the
// management route). Transport problems answer with an HTTP status and the
// plain error object; JSON-RPC errors answer 200 with a JSON-RPC response.
func ServeHTTP(w http.ResponseWriter, r *http.Request, h Handler, maxBody int64, log *slog.Logger) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteHTTPError(w, errs.New(errs.InvalidRequest, "use POST for JSON-RPC"), http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		WriteHTTPError(w, errs.Wrap(err, errs.InvalidRequest, "could not read the request body"), 0)
		return
	}
	if int64(len(body)) > maxBody {
		WriteHTTPError(w, errs.New(errs.RequestTooLarge, "request body exceeds %d bytes", maxBody), 0)
		return
	}
	msg, err := Decode(body)
	var resp *Message
	switch {
	case err != nil:
		var de *DecodeError
		errors.As(err, &de)
		resp = de.Response()
	case !msg.IsRequest():
		resp = NewError(msg.ID, errs.New(errs.InvalidRequest, "expected a request with an id"))
	default:
		resp = Call(r.Context(), h, &Request{Method: msg.Method, Params: msg.Params, ID: msg.ID}, log)
	}
	out, err := Encode(resp)
	if err != nil {
		WriteHTTPError(w, errs.New(errs.Internal, "internal error"), 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// WriteHTTPError answers with the plain error object {"error": {...}}.
// status 0 means the code's own HTTP status.
func WriteHTTPError(w http.ResponseWriter, err error, status int) {
	e := errs.From(err)
	if status == 0 {
		status = e.Code.HTTPStatus()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error errs.Wire `json:"error"`
	}{e.ToWire()})
}

// ParseHTTPError reads a plain error object from an HTTP error body.
func ParseHTTPError(status int, body []byte) *errs.Error {
	var env struct {
		Error *errs.Wire `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil && env.Error.Code != "" {
		return &errs.Error{Code: env.Error.Code, Message: env.Error.Message, Retryable: env.Error.Retryable}
	}
	return errs.New(errs.ServiceUnavailable, "unexpected HTTP status %d from the service", status)
}
