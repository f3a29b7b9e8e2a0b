package opencode

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzOCSkip: the stream reader's shortcut never skips an event a turn
// uses. Whatever ocSkip skips decodes (as dispatch decodes it, a wrapped
// /global/event payload included) to a type no turn uses. The stream is
// JSON.stringify's output, which never repeats a key: an object that does
// is outside the property (ocSkip reads the first "type", encoding/json
// keeps the last).
func FuzzOCSkip(f *testing.F) {
	for _, s := range []string{
		`{"type":"session.updated","properties":{"info":{"id":"ses_1"}}}`,
		`{"type":"session.idle","properties":{"sessionID":"ses_1"}}`,
		`{"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"m","partID":"p","field":"text","delta":"hi"}}`,
		`{"payload":{"type":"session.idle","properties":{"sessionID":"ses_1"}}}`,
		`{"directory":"/w","payload":{"type":"session.diff","properties":{}}}`,
		`{"properties":{"type":"x"},"type":"session.status"}`,
		`{"type":"session.st\u0061tus","properties":{}}`,
		`{"type":"server.heartbeat","properties":{}}`,
		`[{"type":"session.diff"}]`,
		``, `{`, `{"type":"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !ocSkip(data) || repeatsKey(data) {
			return
		}
		var w ocWire
		if err := json.Unmarshal(data, &w); err != nil {
			if _, typeErr := err.(*json.UnmarshalTypeError); !typeErr {
				return // dispatch drops what does not decode
			}
		}
		if w.Type == "" && w.Payload != nil {
			w = *w.Payload
		}
		if ocTurnEvent(w.Type) {
			t.Fatalf("ocSkip skipped %q, a %s event", data, w.Type)
		}
	})
}

// repeatsKey reports whether an object in data has a key twice.
func repeatsKey(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the next token of the enclosing object is a key.
		if len(stack) > 0 {
			stack[len(stack)-1].key = true
		}
	}
}
