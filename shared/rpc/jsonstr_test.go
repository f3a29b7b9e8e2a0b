package rpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// jsonStringSeeds cover every escape, HTML characters, the separators,
// invalid UTF-8, surrogates and runs around the eight-byte steps.
var jsonStringSeeds = []string{
	"",
	"plain ascii text",
	"\x1b[31mred\x1b[0m\r\n",
	"quote \" backslash \\ slash / <tag> & amp",
	"\b\f\n\r\t\x00\x01\x1f\x7f",
	"caf\u00e9 \u2028 \u2029 \U0001F600 \ufffd",
	"bad \xff utf8 \xc3 \xe2\x82 \xed\xa0\x80",
	strings.Repeat("a", 7) + "\n" + strings.Repeat("b", 9) + "\x1b",
	strings.Repeat("0123456789abcdef", 40) + "\u00e9",
	strings.Repeat("\r\n", 20),
}

func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range jsonStringSeeds {
		checkAppendString(t, s)
		for i := range 17 { // every alignment of the special bytes
			checkAppendString(t, strings.Repeat("x", i)+s)
		}
	}
}

// TestAppendStringChunks: one byte to escape anywhere in long plain text
// (the whole-chunk checks), or none.
func TestAppendStringChunks(t *testing.T) {
	plain := strings.Repeat("The quick brown fox; 0123456789 (a+b)*c=d? ", 60)[:2000]
	checkAppendString(t, plain)
	for _, special := range []string{"\"", "\\", "<", ">", "&", "\x00", "\x1f", "\n", "\x7f", "\u00e9", "\u2028", "\u2029", "\xff", "\xe2\x80"} {
		for _, at := range []int{0, 1, 255, 511, 512, 513, 1023, 1024, 1536, 1999, 2000} {
			checkAppendString(t, plain[:at]+special+plain[at:])
		}
	}
}

func checkAppendString(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := AppendString([]byte("prefix"), s); !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendString(%q) = %s, want %s", s, got[6:], want)
	}
}

// unquoteSeeds are literals, valid and not.
var unquoteSeeds = []string{
	`""`, `"plain"`, `"\u001b[31m\r\n"`, `"\"\\\/\b\f\n\r\t"`, `"\u00e9\u2028"`,
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`,
	"\"bad \xff \xc3\"", "\"\xed\xa0\x80\"", `"\'"`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01b\"",
	`"unterminated`, `"a" trailing`, `x`, "\"" + strings.Repeat("abc\\n", 30) + "\"",
	"\"" + strings.Repeat("é", 30) + "\\u00e9\"",
}

func TestUnquoteStringMatchesUnmarshal(t *testing.T) {
	for _, s := range unquoteSeeds {
		checkUnquote(t, []byte(s))
	}
	for _, s := range jsonStringSeeds {
		b, _ := json.Marshal(s)
		checkUnquote(t, b)
		// Unescaped where JSON allows it (bytes from 0x20 up): the raw
		// form must decode the same way.
		raw := append([]byte{'"'}, bytes.ReplaceAll(bytes.ReplaceAll([]byte(s), []byte(`\`), nil), []byte(`"`), nil)...)
		checkUnquote(t, append(raw, '"'))
	}
}

// checkUnquote compares UnquoteString with json.Unmarshal into a string:
// an accepted literal decodes as json.Unmarshal decodes it alone, and data
// without a valid literal in front is not a JSON string either.
func checkUnquote(t *testing.T, data []byte) {
	t.Helper()
	got, n, ok := UnquoteString(data)
	var want string
	if !ok {
		// (json.Unmarshal skips leading space; UnquoteString does not.)
		if len(data) > 0 && data[0] == '"' && json.Unmarshal(data, &want) == nil {
			t.Fatalf("UnquoteString(%q) rejected the string %q", data, want)
		}
		return
	}
	if len(data) == 0 || data[0] != '"' || n < 2 || n > len(data) || data[n-1] != '"' {
		t.Fatalf("UnquoteString(%q) accepted %d bytes", data, n)
	}
	if err := json.Unmarshal(data[:n], &want); err != nil {
		t.Fatalf("UnquoteString(%q) = %q, but json.Unmarshal fails: %v", data, got, err)
	}
	if got != want {
		t.Fatalf("UnquoteString(%q) = %q, want %q", data, got, want)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range jsonStringSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkAppendString(t, s)
		// And back: the encoding decodes to what json.Unmarshal gives.
		checkUnquote(t, AppendString(nil, s))
	})
}

func FuzzUnquoteString(f *testing.F) {
	for _, s := range unquoteSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkUnquote(t, data)
	})
}

type unmarshalCounter struct{ calls []string }

func (u *unmarshalCounter) UnmarshalJSON(b []byte) error {
	u.calls = append(u.calls, string(b))
	return nil
}

func TestUnmarshalResultHandsOverTheValue(t *testing.T) {
	for _, raw := range []string{`{"a":1}`, `null`, `"x"`, `[1,2]`} {
		var got, want unmarshalCounter
		if err := UnmarshalResult(json.RawMessage(raw), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got.calls, "|") != strings.Join(want.calls, "|") {
			t.Fatalf("%s: UnmarshalResult called with %q, json.Unmarshal with %q", raw, got.calls, want.calls)
		}
	}
	// A nil pointer is json.Unmarshal's error, not a call on nil.
	var nilPtr *unmarshalCounter
	if err := UnmarshalResult(json.RawMessage(`{}`), nilPtr); err == nil {
		t.Fatal("a nil pointer was accepted")
	}
	// Other values take json.Unmarshal itself.
	var m map[string]int
	if err := UnmarshalResult(json.RawMessage(`{"a":1}`), &m); err != nil || m["a"] != 1 {
		t.Fatal(m, err)
	}
}

// benchPages are a page of one letter (the termhost benchmark's) and one
// of what a shell prints (escapes, line ends, non-ASCII text).
func benchPages() []struct{ name, data string } {
	line := "\x1b[1;32muser@host\x1b[0m:\x1b[1;34m~/src/deepcode\x1b[0m$ ls -la  — écrit à 12:00\r\n"
	return []struct{ name, data string }{
		{"ascii", strings.Repeat("a", 64<<10)},
		{"terminal", strings.Repeat(line, (64<<10)/len(line)+1)[:64<<10]},
	}
}

// BenchmarkString64K: AppendString and UnquoteString against json.Marshal
// and json.Unmarshal of a 64 KiB string.
func BenchmarkString64K(b *testing.B) {
	for _, page := range benchPages() {
		enc, _ := json.Marshal(page.data)
		buf := make([]byte, 0, 2*len(enc))
		b.Run("append/"+page.name, func(b *testing.B) {
			b.SetBytes(int64(len(page.data)))
			for b.Loop() {
				buf = AppendString(buf[:0], page.data)
			}
		})
		b.Run("marshal/"+page.name, func(b *testing.B) {
			b.SetBytes(int64(len(page.data)))
			for b.Loop() {
				_, _ = json.Marshal(page.data)
			}
		})
		b.Run("unquote/"+page.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, _, ok := UnquoteString(enc); !ok {
					b.Fatal("rejected")
				}
			}
		})
		b.Run("unmarshal/"+page.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			var s string
			for b.Loop() {
				_ = json.Unmarshal(enc, &s)
			}
		})
	}
}
