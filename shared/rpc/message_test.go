package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func TestDecodeAcceptsValidMessages(t *testing.T) {
	cases := []struct {
		in   string
		kind string
		id   string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"status"}`, "request", "1"},
		{`{"jsonrpc":"2.0","id":"a-1","method":"status","params":{}}`, "request", `"a-1"`},
		{`{"jsonrpc":"2.0","id":-7.5,"method":"x","params":{"a":[{"b":1},{"b":2}]}}`, "request", "-7.5"},
		{`{"jsonrpc":"2.0","method":"thread.event","params":{"sequence":3}}`, "notification", ""},
		{`{"jsonrpc":"2.0","id":3,"result":{"ok":true}}`, "response", "3"},
		{`{"jsonrpc":"2.0","id":3,"result":null}`, "response", "3"},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}`, "response", ""},
		{`  {"method":"m","jsonrpc":"2.0","id":"x"}  `, "request", `"x"`},
	}
	for _, c := range cases {
		m, err := Decode([]byte(c.in))
		if err != nil {
			t.Errorf("Decode(%s): %v", c.in, err)
			continue
		}
		kind := "response"
		if m.IsRequest() {
			kind = "request"
		} else if m.IsNotification() {
			kind = "notification"
		}
		if kind != c.kind {
			t.Errorf("Decode(%s) kind = %s, want %s", c.in, kind, c.kind)
		}
		got := ""
		if m.ID != nil {
			got = m.ID.String()
		}
		if got != c.id {
			t.Errorf("Decode(%s) id = %q, want %q", c.in, got, c.id)
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	cases := []struct {
		in     string
		code   errs.Code
		echoID string
	}{
		{`{`, errs.ParseError, ""},
		{`not json`, errs.ParseError, ""},
		{``, errs.ParseError, ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"a"}]`, errs.InvalidRequest, ""},
		{`"hello"`, errs.InvalidRequest, ""},
		{`{"id":1,"method":"a"}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"1.0","id":1,"method":"a"}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","extra":true}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"id":2,"method":"a"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":[1,2]}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":"x"}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":null}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"k":1,"k":2}}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"o":{"k":1,"k":2}}}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","params":{"l":[{"k":1,"k":2}]}}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":true,"method":"a"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"a"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":[1],"method":"a"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":null,"method":"a"}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"method":""}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":5}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"method":"a","result":1}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","result":1}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":null,"result":1}`, errs.InvalidRequest, ""},
		{`{"jsonrpc":"2.0","id":1,"error":"bad"}`, errs.InvalidRequest, "1"},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","extra":1}}`, errs.InvalidRequest, "1"},
	}
	for _, c := range cases {
		_, err := Decode([]byte(c.in))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("Decode(%s) = %v, want a DecodeError", c.in, err)
			continue
		}
		if de.Err.Code != c.code {
			t.Errorf("Decode(%s) code = %s, want %s (%s)", c.in, de.Err.Code, c.code, de.Err.Message)
		}
		got := ""
		if de.ID != nil {
			got = de.ID.String()
		}
		if got != c.echoID {
			t.Errorf("Decode(%s) echoed id %q, want %q", c.in, got, c.echoID)
		}
		resp, err := Encode(de.Response())
		if err != nil || !json.Valid(resp) {
			t.Errorf("error response for %s does not encode: %v", c.in, err)
		}
	}
}

// TestDecodeTooDeepSaysTheLimit: a message nested past the limit is valid
// JSON in every other way, so it is an invalid request that names the
// limit, not a parse error.
func TestDecodeTooDeepSaysTheLimit(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tooDeep := []string{
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":` + deep(10000) + `}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001) + `}`,
		`{"jsonrpc":"2.0","id":1,"result":` + deep(20000) + `}`,
		`{"jsonrpc":"2.0","id":1,"result":` + strings.Repeat("[", 20000) + `}`,
		deep(10001),
	}
	for _, in := range tooDeep {
		_, err := Decode([]byte(in))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("Decode(%.60s…) = %v, want a DecodeError", in, err)
		}
		if de.Err.Code != errs.InvalidRequest || !strings.Contains(de.Err.Message, "nesting deeper than 10000") {
			t.Errorf("Decode(%.60s…) = %s %q, want INVALID_REQUEST naming the limit", in, de.Err.Code, de.Err.Message)
		}
		if w := ErrorObject(de.Err); w.Code != -32600 {
			t.Errorf("wire code = %d, want -32600", w.Code)
		}
	}
	// Deep but within the limit, and brackets inside strings, still decode.
	ok := []string{
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":` + deep(9999) + `}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"s":"` + strings.Repeat("[", 20000) + `"}}`,
	}
	for _, in := range ok {
		if _, err := Decode([]byte(in)); err != nil {
			t.Errorf("Decode(%.60s…) = %v, want it accepted", in, err)
		}
	}
	// Broken and shallow stays a parse error.
	if _, err := Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"a","params":{"s":[1,}}`)); errs.From(err).Code != errs.ParseError {
		t.Errorf("shallow syntax error = %v, want PARSE_ERROR", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	id := StringID("req-1")
	req, err := NewRequest(id, "status", map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode()) = %v for %s", err, b)
	}
	if back.ID.String() != `"req-1"` || back.Method != "status" || string(back.Params) != `{"a":1}` {
		t.Fatalf("round trip changed the message: %s", b)
	}
	if _, err := NewRequest(id, "x", []int{1}); err == nil {
		t.Fatal("array params were accepted")
	}
	e := NewError(&id, errs.New(errs.ServiceDraining, "draining").With("phase", "draining"))
	b, _ = Encode(e)
	back, err = Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Error.Err()
	if got.Code != errs.ServiceDraining || !got.Retryable || got.Data["phase"] != "draining" || back.Error.Code != -32000 {
		t.Fatalf("error did not survive the wire: %+v from %s", got, b)
	}
	if !strings.Contains(string(b), `"retryable":true`) {
		t.Fatalf("retryable missing from %s", b)
	}
}

func TestErrorObjectHidesInternalCause(t *testing.T) {
	w := ErrorObject(errors.New("secret path /home/x/.token"))
	b, _ := json.Marshal(w)
	if strings.Contains(string(b), "secret") || w.Data["code"] != errs.Internal || w.Code != -32603 {
		t.Fatalf("internal cause leaked or wrong code: %s", b)
	}
}

func TestBindParamsStrict(t *testing.T) {
	type P struct {
		Drain   bool `json:"drain"`
		Timeout int  `json:"timeout"`
	}
	var p P
	if err := BindParams(json.RawMessage(`{"drain":true,"timeout":5}`), &p); err != nil || !p.Drain || p.Timeout != 5 {
		t.Fatalf("BindParams = %v, %+v", err, p)
	}
	for _, bad := range []string{`{"drain":true,"bogus":1}`, `{"timeout":"5"}`, `{"timeout":1.5}`} {
		err := BindParams(json.RawMessage(bad), &p)
		if errs.CodeOf(err) != errs.InvalidParams {
			t.Errorf("BindParams(%s) = %v, want INVALID_PARAMS", bad, err)
		}
	}
	if err := BindParams(nil, &p); err != nil {
		t.Fatalf("absent params: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"status","params":{"a":[1,{"b":null}]}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`{"jsonrpc":"2.0","method":"n"}`,
		`[1]`, `{"a":1,"a":2}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("non-DecodeError %T", err)
			}
			if _, err := Encode(de.Response()); err != nil {
				t.Fatalf("error response does not encode: %v", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		// Whatever decodes must re-encode, on one line, and decode to the
		// same kind.
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if !json.Valid(b) || bytes.ContainsAny(b, "\r\n") {
			t.Fatalf("Encode gave %q", b)
		}
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if again.IsRequest() != m.IsRequest() || again.IsNotification() != m.IsNotification() || again.Method != m.Method {
			t.Fatalf("re-decode changed the message: %s vs %s", data, b)
		}
	})
}
