// Package rpc is deepcode's one JSON-RPC 2.0 codec and peer. Every socket
// (management HTTP, business WebSocket, internal service sockets) decodes with
// Decode, so the same strictness applies everywhere: no batches, no unknown
// top-level members, no duplicate keys, object params only, and ids that are
// strings or numbers.
package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Version is the JSON-RPC version every message carries.
const Version = "2.0"

// ID is a request id kept as its exact JSON literal (a string or a number),
// so a response echoes it byte for byte.
type ID struct{ raw string }

// StringID makes a string id.
func StringID(s string) ID {
	b, _ := json.Marshal(s)
	return ID{raw: string(b)}
}

// NumberID makes a numeric id.
func NumberID(n int64) ID { return ID{raw: strconv.FormatInt(n, 10)} }

// String is the id's JSON literal.
func (id ID) String() string { return id.raw }

// MarshalJSON implements json.Marshaler.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// WireError is the JSON-RPC error object. Data always carries the stable code
// and retryable flag from the errs table, plus any extra members.
type WireError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// ErrorObject converts an error into its wire form. Unclassified errors become
// INTERNAL without their cause.
func ErrorObject(err error) *WireError {
	e := errs.From(err)
	data := make(map[string]any, len(e.Data)+2)
	for k, v := range e.Data {
		data[k] = v
	}
	data["code"] = e.Code
	data["retryable"] = e.Retryable
	return &WireError{Code: e.Code.RPCCode(), Message: e.Message, Data: data}
}

// Err converts a received wire error back into an *errs.Error.
func (w *WireError) Err() *errs.Error {
	code := errs.Internal
	retryable := false
	var extra map[string]any
	for k, v := range w.Data {
		switch k {
		case "code":
			if s, ok := v.(string); ok && s != "" {
				code = errs.Code(s)
			}
		case "retryable":
			retryable, _ = v.(bool)
		default:
			if extra == nil {
				extra = map[string]any{}
			}
			extra[k] = v
		}
	}
	if _, ok := w.Data["code"]; !ok {
		code = codeForRPC(w.Code)
		retryable = code.Retryable()
	}
	return &errs.Error{Code: code, Message: w.Message, Retryable: retryable, Data: extra}
}

func codeForRPC(n int) errs.Code {
	switch n {
	case -32700:
		return errs.ParseError
	case -32600:
		return errs.InvalidRequest
	case -32601:
		return errs.MethodNotFound
	case -32602:
		return errs.InvalidParams
	}
	return errs.Internal
}

// Message is one decoded JSON-RPC object: a request (ID and Method), a
// notification (Method, no ID) or a response (ID and Result or Error).
type Message struct {
	ID     *ID
	Method string
	Params json.RawMessage
	Result json.RawMessage
	Error  *WireError

	// wire is the whole encoded response when NewResult wrote Result in
	// place inside it (Result is then its tail but for the closing
	// brace), for ID wireID: Encode returns it instead of copying Result.
	wire   []byte
	wireID string
	// frame is the message as read, for a response to a Call: Call hands
	// it back to the connection once it has decoded the answer.
	frame []byte
}

// IsRequest reports a method call that expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && m.ID != nil }

// IsNotification reports a method call without an id.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID == nil }

// IsResponse reports a result or an error.
func (m *Message) IsResponse() bool { return m.Method == "" }

// Encode serialises m. A response with a nil ID encodes "id": null (the
// answer to a request whose id could not be read).
//
// The raw members (params, result) are valid JSON by construction (they
// come from json.Marshal or from Decode), so they are appended as they are
// instead of being scanned and compacted again by json.Marshal: for a
// 64 KiB terminal page that scan is a third of the encoding cost. Only a
// member holding a line break is compacted, so that every encoded message
// stays on one line (the stdio relay frames by lines).
func Encode(m *Message) ([]byte, error) {
	if m.wire != nil && m.prebuilt() {
		return m.wire, nil
	}
	idLen := 4
	if m.ID != nil {
		idLen = len(m.ID.raw)
	}
	b := make([]byte, 0, 48+idLen+len(m.Method)+len(m.Params)+len(m.Result))
	b = append(b, `{"jsonrpc":"2.0"`...)
	appendID := func() {
		b = append(b, `,"id":`...)
		if m.ID == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, m.ID.raw...)
		}
	}
	if m.IsResponse() {
		appendID()
		if m.Error != nil {
			e, err := json.Marshal(m.Error)
			if err != nil {
				return nil, err
			}
			b = append(append(b, `,"error":`...), e...)
		} else {
			b = append(b, `,"result":`...)
			if len(m.Result) == 0 {
				b = append(b, "null"...)
			} else {
				var err error
				if b, err = appendRaw(b, m.Result); err != nil {
					return nil, err
				}
			}
		}
		return append(b, '}'), nil
	}
	if m.ID != nil {
		appendID()
	}
	b = append(b, `,"method":`...)
	if plainString(m.Method) {
		b = append(append(append(b, '"'), m.Method...), '"')
	} else {
		method, err := json.Marshal(m.Method)
		if err != nil {
			return nil, err
		}
		b = append(b, method...)
	}
	if len(m.Params) > 0 {
		b = append(b, `,"params":`...)
		var err error
		if b, err = appendRaw(b, m.Params); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// plainString reports whether json.Marshal would write s between quotes
// unchanged: printable ASCII without the characters it escapes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendRaw appends a raw JSON value, compacted only if it spans lines.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return append(b, buf.Bytes()...), nil
}

// NewRequest builds a request message with params marshalled from v.
func NewRequest(id ID, method string, params any) (*Message, error) {
	raw, err := marshalParams(params)
	if err != nil {
		return nil, err
	}
	return &Message{ID: &id, Method: method, Params: raw}, nil
}

// NewNotification builds a notification message.
func NewNotification(method string, params any) (*Message, error) {
	raw, err := marshalParams(params)
	if err != nil {
		return nil, err
	}
	return &Message{Method: method, Params: raw}, nil
}

func marshalParams(params any) (json.RawMessage, error) {
	if params == nil {
		return json.RawMessage("{}"), nil
	}
	if raw, ok := params.(json.RawMessage); ok {
		return raw, nil
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, errors.New("rpc: params must marshal to a JSON object")
	}
	return b, nil
}

// NewResult builds a success response. A result that is a JSONAppender
// encodes itself, straight into the response's encoding: Encode then
// neither copies nor allocates a large result again.
func NewResult(id *ID, result any) (*Message, error) {
	if a, ok := result.(JSONAppender); ok {
		m := &Message{ID: id}
		head := append(make([]byte, 0, 512), `{"jsonrpc":"2.0","id":`...)
		if id == nil {
			head = append(head, "null"...)
		} else {
			head = append(head, id.raw...)
			m.wireID = id.raw
		}
		head = append(head, `,"result":`...)
		b, err := a.AppendJSON(head)
		if err != nil {
			return nil, err
		}
		n := len(head)
		if len(b) <= n || !bytes.Equal(b[:n], head) {
			return nil, errors.New("rpc: AppendJSON must append a value to its argument")
		}
		m.Result = b[n:len(b):len(b)]
		// The wire form is kept only when Encode would not change the
		// result (it compacts a result that spans lines).
		if len(m.Result) > 0 && bytes.IndexByte(m.Result, '\n') < 0 && bytes.IndexByte(m.Result, '\r') < 0 {
			b = append(b, '}')
			m.wire = b[:len(b):len(b)]
			m.Result = m.wire[n : len(b)-1 : len(b)-1]
		}
		return m, nil
	}
	b, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	return &Message{ID: id, Result: b}, nil
}

// NewError builds an error response.
func NewError(id *ID, err error) *Message {
	return &Message{ID: id, Error: ErrorObject(err)}
}

// DecodeError is returned by Decode. ID is the request's id when it could be
// read, so the error response can echo it; Err carries the code.
type DecodeError struct {
	ID  *ID
	Err *errs.Error
}

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// Response is the error response a server sends for this decode failure.
func (e *DecodeError) Response() *Message { return NewError(e.ID, e.Err) }

// notAnObject is Decode's error for a message that is not a JSON object.
func notAnObject(data []byte) *DecodeError {
	if !json.Valid(data) {
		if nestingExceeds(data, maxNesting) {
			return tooDeep()
		}
		return &DecodeError{Err: errs.New(errs.ParseError, "message is not valid JSON")}
	}
	if data[0] == '[' {
		return invalid(nil, "batch requests are not supported: send one JSON-RPC object per message")
	}
	return invalid(nil, "a JSON-RPC message must be a JSON object")
}

// tooDeep is Decode's error for a message that would be JSON but for its
// nesting: saying so (and the limit) tells the sender what to change, where
// "not valid JSON" sends them looking for a syntax error that is not there.
func tooDeep() *DecodeError {
	return invalid(nil, "nesting deeper than %d levels: flatten the message", maxNesting)
}

func invalid(id *ID, format string, args ...any) *DecodeError {
	return &DecodeError{ID: id, Err: errs.New(errs.InvalidRequest, format, args...)}
}

// Decode parses one JSON-RPC object strictly. Errors are *DecodeError with
// PARSE_ERROR (not JSON) or INVALID_REQUEST (JSON, but not a valid message).
//
// The message's Params and Result are slices of data, not copies: data must
// not be modified while the message is in use.
func Decode(data []byte) (*Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, notAnObject(data)
	}
	// One pass checks the syntax, splits the members and finds duplicate
	// top-level names (see scan.go).
	var room [6]member
	members, err := scanObject(data, room[:0])
	if err != nil {
		if _, dup := err.(duplicateMemberError); dup {
			return nil, invalid(nil, "%v", err)
		}
		// The top-level object is one level; its member values may nest
		// maxNesting more.
		if nestingExceeds(data, maxNesting+1) {
			return nil, tooDeep()
		}
		return nil, &DecodeError{Err: errs.New(errs.ParseError, "message is not valid JSON")}
	}
	// The message and its id in one allocation.
	mid := new(struct {
		msg Message
		id  ID
	})
	msg := &mid.msg
	// Read the id first so that every later error can echo it.
	var idRaw []byte
	hasID := false
	for _, m := range members {
		if m.name == "id" {
			idRaw, hasID = m.value, true
		}
	}
	if hasID {
		switch idRaw[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			mid.id.raw = string(idRaw)
			msg.ID = &mid.id
		case 'n':
		default:
			return nil, invalid(nil, `"id" must be a string or a number`)
		}
	}
	var hasJSONRPC, hasMethod, hasResult bool
	for _, m := range members {
		raw := m.value
		switch m.name {
		case "jsonrpc":
			hasJSONRPC = true
			if string(raw) != `"`+Version+`"` {
				if v, ok := stringValue(raw); !ok || v != Version {
					return nil, invalid(msg.ID, `"jsonrpc" must be "2.0"`)
				}
			}
		case "id":
		case "method":
			hasMethod = true
			v, ok := stringValue(raw)
			if !ok || v == "" {
				return nil, invalid(msg.ID, `"method" must be a non-empty string`)
			}
			msg.Method = v
		case "params":
			if raw[0] != '{' {
				return nil, invalid(msg.ID, `"params" must be a JSON object`)
			}
			msg.Params = raw
		case "result":
			hasResult = true
			msg.Result = raw
		case "error":
			var w WireError
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if raw[0] != '{' || dec.Decode(&w) != nil || w.Message == "" && w.Code == 0 {
				return nil, invalid(msg.ID, `"error" must be an object with "code" and "message"`)
			}
			msg.Error = &w
		default:
			return nil, invalid(msg.ID, "unknown member %q", m.name)
		}
	}
	if !hasJSONRPC {
		return nil, invalid(msg.ID, `missing "jsonrpc": "2.0"`)
	}
	// Duplicate names nested in params (the scan checked the top level).
	if k, dup := firstDuplicateKey(msg.Params); dup {
		return nil, invalid(msg.ID, "params: duplicate key %s", strconv.Quote(k))
	}
	switch {
	case msg.Method != "":
		if hasResult || msg.Error != nil {
			return nil, invalid(msg.ID, "a request cannot carry result or error")
		}
		if hasID && msg.ID == nil {
			return nil, invalid(nil, `"id" must be a string or a number`)
		}
	case hasResult || msg.Error != nil:
		if hasResult == (msg.Error != nil) {
			return nil, invalid(msg.ID, "a response carries exactly one of result and error")
		}
		if !hasID {
			return nil, invalid(nil, `a response needs "id"`)
		}
		if msg.ID == nil && msg.Error == nil {
			return nil, invalid(nil, `a result needs a string or number "id"`)
		}
	default:
		if hasMethod {
			return nil, invalid(msg.ID, `"method" must be a non-empty string`)
		}
		return nil, invalid(msg.ID, `a message needs "method", "result" or "error"`)
	}
	return msg, nil
}

// duplicateMemberError is a well-formed object with a repeated member.
type duplicateMemberError string

func (e duplicateMemberError) Error() string { return "duplicate member " + strconv.Quote(string(e)) }

// prebuilt reports whether m.wire still encodes m: a response with the
// same id and Result still the slice of wire that NewResult made.
func (m *Message) prebuilt() bool {
	if m.Method != "" || m.Error != nil || len(m.Result) == 0 || len(m.Params) != 0 {
		return false
	}
	if (m.ID == nil) != (m.wireID == "") || m.ID != nil && m.ID.raw != m.wireID {
		return false
	}
	n := len(m.wire) - 1 - len(m.Result)
	return n > 0 && &m.wire[n] == &m.Result[0]
}
