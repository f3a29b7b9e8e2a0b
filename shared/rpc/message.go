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
	"io"
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
	b := make([]byte, 0, 48+len(m.Method)+len(m.Params)+len(m.Result))
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
	method, err := json.Marshal(m.Method)
	if err != nil {
		return nil, err
	}
	b = append(append(b, `,"method":`...), method...)
	if len(m.Params) > 0 {
		b = append(b, `,"params":`...)
		if b, err = appendRaw(b, m.Params); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
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

// NewResult builds a success response.
func NewResult(id *ID, result any) (*Message, error) {
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

func invalid(id *ID, format string, args ...any) *DecodeError {
	return &DecodeError{ID: id, Err: errs.New(errs.InvalidRequest, format, args...)}
}

// Decode parses one JSON-RPC object strictly. Errors are *DecodeError with
// PARSE_ERROR (not JSON) or INVALID_REQUEST (JSON, but not a valid message).
func Decode(data []byte) (*Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		if !json.Valid(data) {
			return nil, &DecodeError{Err: errs.New(errs.ParseError, "message is not valid JSON")}
		}
		if data[0] == '[' {
			return nil, invalid(nil, "batch requests are not supported: send one JSON-RPC object per message")
		}
		return nil, invalid(nil, "a JSON-RPC message must be a JSON object")
	}
	// splitObject scans the object once, checking its syntax as it goes
	// (a separate json.Valid pass would scan large results twice).
	members, err := splitObject(data)
	if err != nil {
		var dup duplicateMemberError
		if errors.As(err, &dup) {
			return nil, invalid(nil, "%v", err)
		}
		return nil, &DecodeError{Err: errs.New(errs.ParseError, "message is not valid JSON")}
	}
	var msg Message
	// Read the id first so that every later error can echo it.
	if raw, ok := members["id"]; ok {
		id, err := parseID(raw)
		if err != nil {
			return nil, invalid(nil, "%v", err)
		}
		msg.ID = id
	}
	for name, raw := range members {
		switch name {
		case "jsonrpc":
			var v string
			if json.Unmarshal(raw, &v) != nil || v != Version {
				return nil, invalid(msg.ID, `"jsonrpc" must be "2.0"`)
			}
		case "id":
		case "method":
			if json.Unmarshal(raw, &msg.Method) != nil || msg.Method == "" {
				return nil, invalid(msg.ID, `"method" must be a non-empty string`)
			}
		case "params":
			if raw[0] != '{' {
				return nil, invalid(msg.ID, `"params" must be a JSON object`)
			}
			msg.Params = raw
		case "result":
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
			return nil, invalid(msg.ID, "unknown member %q", name)
		}
	}
	if _, ok := members["jsonrpc"]; !ok {
		return nil, invalid(msg.ID, `missing "jsonrpc": "2.0"`)
	}
	if err := checkDuplicateKeys(msg.Params); err != nil {
		return nil, invalid(msg.ID, "params: %v", err)
	}
	_, hasResult := members["result"]
	switch {
	case msg.Method != "":
		if hasResult || msg.Error != nil {
			return nil, invalid(msg.ID, "a request cannot carry result or error")
		}
		if _, present := members["id"]; present && msg.ID == nil {
			return nil, invalid(nil, `"id" must be a string or a number`)
		}
	case hasResult || msg.Error != nil:
		if hasResult == (msg.Error != nil) {
			return nil, invalid(msg.ID, "a response carries exactly one of result and error")
		}
		if _, present := members["id"]; !present {
			return nil, invalid(nil, `a response needs "id"`)
		}
		if msg.ID == nil && msg.Error == nil {
			return nil, invalid(nil, `a result needs a string or number "id"`)
		}
	default:
		if _, ok := members["method"]; ok {
			return nil, invalid(msg.ID, `"method" must be a non-empty string`)
		}
		return nil, invalid(msg.ID, `a message needs "method", "result" or "error"`)
	}
	return &msg, nil
}

// parseID accepts a string or number literal; null yields a nil id (valid
// only in error responses, checked by the caller).
func parseID(raw json.RawMessage) (*ID, error) {
	switch raw[0] {
	case '"':
		return &ID{raw: string(raw)}, nil
	case 'n':
		return nil, nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return &ID{raw: string(raw)}, nil
	}
	return nil, errors.New(`"id" must be a string or a number`)
}

// duplicateMemberError is a well-formed object with a repeated member.
type duplicateMemberError string

func (e duplicateMemberError) Error() string { return "duplicate member " + strconv.Quote(string(e)) }

// splitObject returns the members of a JSON object, rejecting duplicate
// names with duplicateMemberError and any syntax error, including data
// after the object, with another error.
func splitObject(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, err
	}
	members := make(map[string]json.RawMessage, 4)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errors.New("object member name is not a string")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if _, dup := members[name]; dup {
			return nil, duplicateMemberError(name)
		}
		members[name] = raw
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("object not closed")
	}
	if dec.InputOffset() != int64(len(data)) {
		return nil, errors.New("data after the object")
	}
	return members, nil
}

// checkDuplicateKeys walks raw and rejects any object with a repeated key,
// at any depth: the standard decoder would silently keep the last one.
func checkDuplicateKeys(raw json.RawMessage) error {
	if len(raw) == 0 || bytes.IndexByte(raw, '{') < 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type frame struct {
		keys      map[string]struct{}
		expectKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				if top >= 0 && stack[top].keys != nil {
					stack[top].expectKey = true
				}
				stack = append(stack, frame{keys: map[string]struct{}{}, expectKey: true})
			case '[':
				if top >= 0 && stack[top].keys != nil {
					stack[top].expectKey = true
				}
				stack = append(stack, frame{})
			case '}', ']':
				stack = stack[:top]
			}
		case string:
			if top >= 0 && stack[top].keys != nil && stack[top].expectKey {
				if _, dup := stack[top].keys[t]; dup {
					return errors.New("duplicate key " + strconv.Quote(t))
				}
				stack[top].keys[t] = struct{}{}
				stack[top].expectKey = false
				continue
			}
			if top >= 0 && stack[top].keys != nil {
				stack[top].expectKey = true
			}
		default:
			if top >= 0 && stack[top].keys != nil {
				stack[top].expectKey = true
			}
		}
	}
}
