package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// decodeSeeds are messages on the edges the scanner must judge exactly as
// the reference (decodeReference) does.
func decodeSeeds() []string {
	deep := func(n int, open, close string) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	many := func(n int, dupAt int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			k := i
			if i == dupAt {
				k = 0
			}
			fmt.Fprintf(&b, `"k%d":%d`, k, i)
		}
		b.WriteString("}")
		return b.String()
	}
	manyTop := func(n int, dupAt int) string {
		var b strings.Builder
		b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"m"`)
		for i := range n {
			k := i
			if i == dupAt {
				k = 0
			}
			fmt.Fprintf(&b, `,"x%d":%d`, k, i)
		}
		b.WriteString("}")
		return b.String()
	}
	huge := strings.Repeat("a", 1<<20)
	return []string{
		`{"jsonrpc":"2.0","id":1,"method":"status","params":{"a":[1,{"b":null}]}}`,
		`{"jsonrpc":"2.0","id":"x","result":{}}`,
		`{"jsonrpc":"2.0","method":"n"}`,
		`[1]`, `{"a":1,"a":2}`, `{}`, ``, ` `, `{`, `}`, `"x"`, `1`, `null`,
		// Nested duplicates: rejected in params, kept in result and error.
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"o":{"k":1,"k":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"l":[{"k":1},{"k":1,"k":2}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"k":{"k":{"k":1}},"j":[{"k":[{"k":1}]}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":{"x":1,"x":2},"a":3}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"k":1,"k":2}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","code":2}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x","data":{"a":1,"a":2}}}`,
		// Escaped names: "a" and "\u0061" are one name.
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":1,"\u0061":2}}`,
		`{"jsonrpc":"2.0","\u0069d":1,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"\u0069d":2,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"\/":1,"/":2}}`,
		`{"jsonrpc":"2\u002e0","id":1,"method":"\u0061"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","par\u0061ms":{"k":1,"k":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"\uD834\uDD1E":1,"𝄞":2}}`,
		// Invalid UTF-8 and lone surrogates become U+FFFD in names.
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":{\"\xff\":1,\"\xfe\":2}}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":{\"\xff\":1,\"\\ufffd\":2}}",
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"\ud800":1,"\udc00":2}}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
		"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"a\",\"params\":{\"s\":\"\xed\xa0\x80\"}}",
		"{\"\xff\":1,\"\xfe\":2}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\",\"params\":{\"\xc3\xa9\":1,\"\\u00e9\":2}}",
		// Control characters, bad escapes.
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\x01\"}",
		`{"jsonrpc":"2.0","id":1,"method":"a\x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a\u12"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a\u12G4"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a\`,
		// Numbers.
		`{"jsonrpc":"2.0","id":-0,"method":"a"}`, `{"jsonrpc":"2.0","id":01,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1.,"method":"a"}`, `{"jsonrpc":"2.0","id":1e,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1E+5,"method":"a"}`, `{"jsonrpc":"2.0","id":-,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1.5e-3,"method":"a"}`, `{"jsonrpc":"2.0","id":+1,"method":"a"}`,
		`{"jsonrpc":"2.0","method":"a","id":1`, `{"jsonrpc":"2.0","method":"a","id":1.`,
		// A duplicate is found before what follows it is judged.
		`{"jsonrpc":"2.0","id":1,"id":2x`, `{"jsonrpc":"2.0","id":1,"id":2`,
		`{"id":1,"id":01}`, `{"id":1,"id":truex}`, `{"id":"a","id":"b"y}`,
		`{"id":1,"id":tru}`, `{"id":1,"id":"x`, `{"a":1,"a"`, `{"a":1,"a":}`,
		`{"a":[1,2]]`, `{"a":{"b":1}}}`,
		// Structure.
		`{"a":1,}`, `{,}`, `{"a":1 "b":2}`, `{1:2}`, `{"a" 1}`, `{"a":1]`, `{]`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":[1,]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":[,1]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":{"b"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":{"b":1,}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":tRue}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":[true,false,null,-1.5e+3,"x",{},[]]}}`,
		" \t\r\n{ \"jsonrpc\" : \"2.0\" , \"id\" : 1 , \"method\" : \"a\" , \"params\" : { \"a\" : [ 1 , 2 ] } } \n",
		"\v{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\u00a0",
		"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\x00",
		"{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":{\"a\":1\v}}",
		`{"jsonrpc":"2.0","method":"a"}{}`, `{"jsonrpc":"2.0","method":"a"} {}`,
		// Message rules.
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}`,
		`{"jsonrpc":"2.0","id":true,"method":"a"}`, `{"jsonrpc":"2.0","id":null,"method":"a"}`,
		`{"jsonrpc":"2.0","id":1,"method":null}`, `{"jsonrpc":null,"id":1,"method":"a"}`,
		`{"jsonrpc":2,"id":1,"method":"a"}`, `{"jsonrpc":"2.0","id":1,"method":""}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":null}`,
		`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"1.0","method":5,"id":1,"extra":{"k":1,"k":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"k":1,"k":2},"extra":1}`,
		`{"id":1,"method":"a","params":{"k":1,"k":2}}`,
		// Deep nesting: 10,000 levels per member value, no more.
		`{"jsonrpc":"2.0","id":1,"result":` + deep(10000, "[", "]") + `}`,
		`{"jsonrpc":"2.0","id":1,"result":` + deep(10001, "[", "]") + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":` + deep(9999, "[", "]") + `}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"a":` + deep(10000, "[", "]") + `}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + strings.Repeat(`{"a":1,"a":`, 5000) + "1" + strings.Repeat("}", 5000) + `}`,
		`{"jsonrpc":"2.0","id":1,"result":` + deep(20000, "[", "") + `}`,
		// Huge strings and many names (the map path).
		`{"jsonrpc":"2.0","id":1,"result":"` + huge + `"}`,
		`{"jsonrpc":"2.0","id":1,"result":"` + huge + `\"}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"` + huge + `":1,"` + huge + `":2}}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + many(40, -1) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + many(40, 17) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":` + many(40, 39) + `}`,
		`{"jsonrpc":"2.0","id":1,"method":"a","params":{"o":` + many(30, 29) + `,"o":1}}`,
		manyTop(40, -1), manyTop(40, 30), manyTop(10, 9),
	}
}

// checkAgainstReference fails unless Decode answers data as the reference
// does: the same acceptance, error code, echoed id and message (when the
// reference's own message does not depend on map order), or the same
// decoded members.
func checkAgainstReference(t *testing.T, data []byte) {
	t.Helper()
	in := bytes.Clone(data)
	got, gerr := Decode(data)
	if !bytes.Equal(in, data) {
		t.Fatalf("Decode modified its input")
	}
	want, werr := decodeReference(data)
	short := data
	if len(short) > 200 {
		short = short[:200]
	}
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("Decode(%q) error = %v, reference = %v", short, gerr, werr)
	}
	if werr != nil {
		var g, w *DecodeError
		if !errors.As(gerr, &g) || !errors.As(werr, &w) {
			t.Fatalf("Decode(%q): not DecodeErrors: %v / %v", short, gerr, werr)
		}
		if g.Err.Code != w.Err.Code || idString(g.ID) != idString(w.ID) {
			t.Fatalf("Decode(%q) = %s id %q (%s), reference %s id %q (%s)", short,
				g.Err.Code, idString(g.ID), g.Err.Message, w.Err.Code, idString(w.ID), w.Err.Message)
		}
		if g.Err.Message != w.Err.Message && !referenceMaySay(data, g.Err.Message) {
			t.Fatalf("Decode(%q) says %q, reference %q", short, g.Err.Message, w.Err.Message)
		}
		return
	}
	if idString(got.ID) != idString(want.ID) || (got.ID == nil) != (want.ID == nil) || got.Method != want.Method ||
		(got.Params == nil) != (want.Params == nil) || !bytes.Equal(got.Params, want.Params) ||
		(got.Result == nil) != (want.Result == nil) || !bytes.Equal(got.Result, want.Result) ||
		!reflect.DeepEqual(got.Error, want.Error) {
		t.Fatalf("Decode(%q) = %+v, reference %+v", short, got, want)
	}
}

// referenceMaySay reports whether the reference, which checks members in
// map order, gives msg on some run.
func referenceMaySay(data []byte, msg string) bool {
	for range 200 {
		_, err := decodeReference(data)
		var de *DecodeError
		if errors.As(err, &de) && de.Err.Message == msg {
			return true
		}
	}
	return false
}

func idString(id *ID) string {
	if id == nil {
		return "<nil>"
	}
	return id.String()
}

func TestDecodeMatchesReferenceOnSeeds(t *testing.T) {
	for _, s := range decodeSeeds() {
		checkAgainstReference(t, []byte(s))
	}
}

// TestDecodeMatchesReferenceOnRandomMessages generates JSON-RPC-shaped
// messages with random values, duplicate and escaped names, then cuts and
// corrupts them.
func TestDecodeMatchesReferenceOnRandomMessages(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 500
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range n {
		msg := randomMessage(r)
		checkAgainstReference(t, msg)
		for range 3 {
			checkAgainstReference(t, mutate(r, msg))
		}
	}
}

func randomMessage(r *rand.Rand) []byte {
	var b bytes.Buffer
	b.WriteString("{")
	names := []string{`"jsonrpc"`, `"id"`, `"method"`, `"params"`, `"result"`, `"error"`, `"\u0069d"`, `"x"`, `"par\u0061ms"`}
	n := r.IntN(5)
	parts := []string{`"jsonrpc":"2.0"`}
	for range n {
		name := names[r.IntN(len(names))]
		var v string
		switch name {
		case `"jsonrpc"`:
			v = []string{`"2.0"`, `"1.0"`, `2`, `null`, `"2\u002e0"`}[r.IntN(5)]
		case `"id"`, `"\u0069d"`:
			v = []string{`1`, `"a"`, `null`, `true`, `-1.5e3`, `{}`}[r.IntN(6)]
		case `"method"`:
			v = []string{`"m"`, `""`, `5`, `null`, `"\u006d"`}[r.IntN(5)]
		case `"error"`:
			v = []string{`{"code":1,"message":"x"}`, `{"code":1,"message":"x","data":{"a":1}}`, `"e"`, `{"code":0,"message":""}`, `{"code":1,"message":"x","z":1}`}[r.IntN(5)]
		default:
			var vb bytes.Buffer
			randomValue(r, &vb, 0, r.IntN(2) == 0)
			v = vb.String()
		}
		parts = append(parts, name+":"+v)
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	for i, p := range parts {
		if i > 0 {
			b.WriteString(randomSpace(r) + "," + randomSpace(r))
		}
		b.WriteString(p)
	}
	b.WriteString("}")
	return b.Bytes()
}

func randomSpace(r *rand.Rand) string {
	if r.IntN(4) != 0 {
		return ""
	}
	return []string{" ", "\t", "\r\n", "  "}[r.IntN(4)]
}

var randomKeys = []string{`"a"`, `"\u0061"`, `"b"`, `"\ud800"`, `"\udc00"`, "\"\xff\"", `"\ufffd"`, `"é"`, `"\u00e9"`, `""`, `"\/"`, `"/"`}

func randomValue(r *rand.Rand, b *bytes.Buffer, depth int, object bool) {
	if object || depth < 4 && r.IntN(3) == 0 {
		b.WriteString("{")
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(randomKeys[r.IntN(len(randomKeys))] + randomSpace(r) + ":" + randomSpace(r))
			randomValue(r, b, depth+1, false)
		}
		b.WriteString("}")
		return
	}
	if depth < 4 && r.IntN(3) == 0 {
		b.WriteString("[")
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString(",")
			}
			randomValue(r, b, depth+1, false)
		}
		b.WriteString("]")
		return
	}
	b.WriteString([]string{`1`, `-0.5e+7`, `"s"`, `"\n\u001b[0m"`, `true`, `false`, `null`, "\"\xc3\xa9\xff\"", `"` + strings.Repeat("x", r.IntN(40)) + `"`}[r.IntN(9)])
}

// mutate cuts, inserts or flips a byte.
func mutate(r *rand.Rand, msg []byte) []byte {
	out := bytes.Clone(msg)
	if len(out) == 0 {
		return out
	}
	i := r.IntN(len(out))
	switch r.IntN(4) {
	case 0:
		return out[:i]
	case 1:
		c := []byte(`{}[]",:\ 0-e.tfnu`)[r.IntN(17)]
		return append(out[:i:i], append([]byte{c}, out[i:]...)...)
	case 2:
		out[i] = byte(r.IntN(256))
		return out
	default:
		return append(out[:i:i], out[i+1:]...)
	}
}

func FuzzDecodeMatchesReference(f *testing.F) {
	for _, s := range decodeSeeds() {
		if len(s) < 4096 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstReference(t, data)
	})
}

// encodeMethodReference is Encode's method member as json.Marshal writes it.
func encodeMethodReference(method string) string {
	b, _ := json.Marshal(method)
	return `,"method":` + string(b)
}

func checkEncodeMethod(t *testing.T, method string) {
	t.Helper()
	if method == "" {
		return // a response
	}
	b, err := Encode(&Message{Method: method, Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := encodeMethodReference(method); !bytes.Contains(b, []byte(want+`,"params"`)) {
		t.Fatalf("Encode(method %q) = %s, want %s", method, b, want)
	}
}

func TestEncodeMethodAsMarshal(t *testing.T) {
	for _, m := range []string{"status", "thread/read", "a b", "<x>", "a&b", `q"`, `b\s`, "tab\t", "\x7f", "é", "\u2028", "\xff"} {
		checkEncodeMethod(t, m)
	}
}

func FuzzEncodeMethod(f *testing.F) {
	for _, m := range []string{"status", "<", "é", "\xff", "\u2029"} {
		f.Add(m)
	}
	f.Fuzz(checkEncodeMethod)
}
