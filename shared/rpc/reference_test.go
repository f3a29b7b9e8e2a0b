package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// decodeReference is Decode as it was before the single-pass scanner
// (scan.go): a json.Decoder token walk that splits the object and a second
// walk over params for nested duplicate keys. FuzzDecodeMatchesReference
// holds the two to the same answers, and BenchmarkDecode64K compares them.
func decodeReference(data []byte) (*Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, notAnObject(data) // shared: the two differ on objects only
	}
	members, err := splitObjectReference(data)
	if err != nil {
		var dup duplicateMemberError
		if errors.As(err, &dup) {
			return nil, invalid(nil, "%v", err)
		}
		if nestingExceeds(data, maxNesting+1) {
			return nil, tooDeep()
		}
		return nil, &DecodeError{Err: errs.New(errs.ParseError, "message is not valid JSON")}
	}
	var msg Message
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
	if err := checkDuplicateKeysReference(msg.Params); err != nil {
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

func splitObjectReference(data []byte) (map[string]json.RawMessage, error) {
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

func checkDuplicateKeysReference(raw json.RawMessage) error {
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
