package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func intPtr(n int) *int { return &n }

var terminalReadResultSeeds = []TerminalReadResult{
	{},
	{Offset: 1, NextOffset: 2, Data: "plain", AvailableFrom: 3, HeadOffset: 4, HasMore: true},
	{Data: "\x1b[1;32m$ \x1b[0mls\r\nfile <a> & \"b\" \\c\r\n\u2028\u00e9\U0001F600", Truncated: true, Exited: true, ExitCode: intPtr(0)},
	{Offset: -1, NextOffset: 1 << 62, Data: "bad \xff\xc3 utf8\x00\x7f", ExitCode: intPtr(-137)},
	{Data: strings.Repeat("a", 64<<10), HeadOffset: 100000, HasMore: true},
}

// TestReadResultAppendJSON: AppendJSON writes what json.Marshal writes.
func TestReadResultAppendJSON(t *testing.T) {
	for _, r := range terminalReadResultSeeds {
		checkAppendJSON(t, r)
	}
}

func checkAppendJSON(t *testing.T, r TerminalReadResult) {
	t.Helper()
	want, err := json.Marshal(terminalReadResultJSON(r))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.AppendJSON([]byte("x"))
	if err != nil || !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("AppendJSON = %s, %v\nwant %s", got, err, want)
	}
}

// unmarshalSeeds: the encoder's own output, then what only encoding/json
// handles (other spellings, null, unknown and repeated members, wrong
// types, fractions, overflow, syntax errors).
var unmarshalSeeds = []string{
	`{}`, ` { "offset" : 1 , "data" : "x\ny" } `, `{"data":"\u001b[0m\r\n","exitCode":3}`,
	`{"Offset":5,"DATA":"case"}`, `{"offset":null,"exitCode":null,"data":null}`, `{"extra":1,"offset":2}`,
	`{"offset":1,"offset":2}`, `{"offset":"1"}`, `{"offset":1.5}`, `{"offset":1e3}`, `{"offset":-0}`,
	`{"offset":01}`, `{"offset":99999999999999999999}`, `{"exitCode":9223372036854775807}`,
	`{"truncated":true,"hasMore":false,"exited":1}`, `{"offset":1,}`, `{"offset":1} x`, `{"offset":1`,
	`[1]`, `null`, `"s"`, "{\"data\":\"a\x01\"}", "{\"data\":\"\xff\"}", `{"d\u0061ta":"escaped name"}`,
	`{"data":"\ud800"}`, `{"offset":-}`, `{"truncated":tru}`, ``, ` `,
}

// TestReadResultUnmarshalJSON: UnmarshalJSON stores what json.Unmarshal
// stores, over a result that already holds values (absent members stay),
// and fails where it fails.
func TestReadResultUnmarshalJSON(t *testing.T) {
	for _, s := range unmarshalSeeds {
		checkUnmarshal(t, []byte(s))
	}
	for _, r := range terminalReadResultSeeds {
		b, _ := json.Marshal(terminalReadResultJSON(r))
		checkUnmarshal(t, b)
	}
}

// prior is a result holding values before a decode; its exit code is a
// pointer json.Unmarshal writes through.
func prior() (TerminalReadResult, *int) {
	code := 42
	return TerminalReadResult{Offset: 7, NextOffset: 8, Data: "old", AvailableFrom: 9, Truncated: true, HeadOffset: 10, HasMore: true, Exited: true, ExitCode: &code}, &code
}

func checkUnmarshal(t *testing.T, data []byte) {
	t.Helper()
	for _, fresh := range []bool{true, false} {
		var got, want TerminalReadResult
		var gotCode, wantCode *int
		if !fresh {
			got, gotCode = prior()
			want, wantCode = prior()
		}
		gotErr := got.UnmarshalJSON(data)
		wantErr := json.Unmarshal(data, (*terminalReadResultJSON)(&want))
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: UnmarshalJSON error %v, json.Unmarshal error %v", data, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: UnmarshalJSON stored %+v, json.Unmarshal %+v", data, got, want)
		}
		if !fresh && (gotCode == got.ExitCode) != (wantCode == want.ExitCode) {
			t.Fatalf("%q: the exit code pointer was replaced differently", data)
		}
		// And through json.Unmarshal, which checks the syntax first.
		var via TerminalReadResult
		var ref TerminalReadResult
		viaErr := json.Unmarshal(data, &via)
		refErr := json.Unmarshal(data, (*terminalReadResultJSON)(&ref))
		if (viaErr == nil) != (refErr == nil) || !reflect.DeepEqual(via, ref) {
			t.Fatalf("%q: json.Unmarshal with the method: %+v, %v; without: %+v, %v", data, via, viaErr, ref, refErr)
		}
	}
}

func FuzzReadResultCodec(f *testing.F) {
	for _, s := range unmarshalSeeds {
		f.Add([]byte(s), "", int64(0), false)
	}
	for _, r := range terminalReadResultSeeds {
		f.Add([]byte(`{}`), r.Data, r.Offset, r.Truncated)
	}
	f.Fuzz(func(t *testing.T, data []byte, text string, n int64, flag bool) {
		checkUnmarshal(t, data)
		r := TerminalReadResult{Offset: n, NextOffset: -n, Data: text, AvailableFrom: n / 3, Truncated: flag, HeadOffset: n ^ 0x5555, HasMore: !flag, Exited: flag}
		if flag {
			r.ExitCode = intPtr(int(n))
		}
		checkAppendJSON(t, r)
		// The encoding decodes back to r, by both decoders.
		b, _ := r.AppendJSON(nil)
		checkUnmarshal(t, b)
	})
}
