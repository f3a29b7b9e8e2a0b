package termhost

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// reference is the WHATWG UTF-8 decoder, byte by byte, with replacement.
func reference(p []byte) string {
	var b strings.Builder
	need, seen := 0, 0
	var cp rune
	lower, upper := byte(0x80), byte(0xBF)
	for i := 0; i < len(p); i++ {
		c := p[i]
		if need == 0 {
			switch {
			case c < 0x80:
				b.WriteByte(c)
			case c >= 0xC2 && c <= 0xDF:
				need, cp = 1, rune(c&0x1F)
			case c >= 0xE0 && c <= 0xEF:
				if c == 0xE0 {
					lower = 0xA0
				}
				if c == 0xED {
					upper = 0x9F
				}
				need, cp = 2, rune(c&0xF)
			case c >= 0xF0 && c <= 0xF4:
				if c == 0xF0 {
					lower = 0x90
				}
				if c == 0xF4 {
					upper = 0x8F
				}
				need, cp = 3, rune(c&0x7)
			default:
				b.WriteRune(utf8.RuneError)
			}
			continue
		}
		if c < lower || c > upper {
			need, seen, cp, lower, upper = 0, 0, 0, 0x80, 0xBF
			b.WriteRune(utf8.RuneError)
			i--
			continue
		}
		lower, upper = 0x80, 0xBF
		cp = cp<<6 | rune(c&0x3F)
		seen++
		if seen == need {
			b.WriteRune(cp)
			need, seen, cp = 0, 0, 0
		}
	}
	if need != 0 {
		b.WriteRune(utf8.RuneError)
	}
	return b.String()
}

// decodeChunks feeds p in the given chunk sizes.
func decodeChunks(p []byte, sizes func() int) (string, []string) {
	var d decoder
	var out strings.Builder
	var pieces []string
	emit := func(b []byte) {
		pieces = append(pieces, string(b))
		out.Write(b)
	}
	for len(p) > 0 {
		n := min(sizes(), len(p))
		d.decode(p[:n], emit)
		p = p[n:]
	}
	d.flush(emit)
	return out.String(), pieces
}

func TestDecoderVectors(t *testing.T) {
	for in, want := range map[string]string{
		"plain ascii":          "plain ascii",
		"€😀ä":                  "€😀ä",
		"\xE2\x82A":            "\uFFFDA",
		"\xF0\x9F\x98":         "\uFFFD",
		"\xED\xA0\x80":         "\uFFFD\uFFFD\uFFFD", // a surrogate
		"\xC0\xAF":             "\uFFFD\uFFFD",       // overlong
		"\xE0\x80\xAF":         "\uFFFD\uFFFD\uFFFD",
		"\xF4\x90\x80\x80":     "\uFFFD\uFFFD\uFFFD\uFFFD", // above U+10FFFF
		"\xFF\xFEa":            "\uFFFD\uFFFDa",
		"a\r\n\x1b[0m\x00":     "a\r\n\x1b[0m\x00",
		"\xEF\xBF\xBD":         "\uFFFD", // a real U+FFFD
		"\xF0\x9F\x98\x80\x80": "😀\uFFFD",
		"\xE2\x82\xE2\x82\xAC": "\uFFFD€",
	} {
		if got := reference([]byte(in)); got != want {
			t.Fatalf("reference(%q) = %q, want %q", in, got, want)
		}
		for size := 1; size <= len(in)+1; size++ {
			got, pieces := decodeChunks([]byte(in), func() int { return size })
			if got != want {
				t.Fatalf("decode(%q) by %d = %q, want %q", in, size, got, want)
			}
			for _, p := range pieces {
				if !utf8.ValidString(p) {
					t.Fatalf("decode(%q) by %d emitted %q", in, size, p)
				}
			}
		}
	}
}

// FuzzDecoder: any bytes, split anywhere, decode to what the reference
// decoder gives for the whole, in pieces that are each valid UTF-8.
func FuzzDecoder(f *testing.F) {
	f.Add([]byte("h\xE2\x82\xACllo \xF0\x9F\x98\x80 \xFF\xC3"), uint64(1))
	f.Add([]byte("\xED\xA0\x80\xF4\x90\x80\x80\xE0\x80"), uint64(7))
	f.Fuzz(func(t *testing.T, p []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed))
		got, pieces := decodeChunks(p, func() int { return 1 + r.IntN(5) })
		if want := reference(p); got != want {
			t.Fatalf("decode(%q) = %q, want %q", p, got, want)
		}
		for _, piece := range pieces {
			if !utf8.ValidString(piece) {
				t.Fatalf("emitted %q", piece)
			}
		}
	})
}

func TestDecoderRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "\r", "\n", "\x1b[", "é", "€", "😀", "\xFF", "\xE2\x82", "\xF0\x9F", "\xED\xA0\x80", "\xC0"}
	for range 2000 {
		var b strings.Builder
		for range r.IntN(200) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		p := []byte(b.String())
		got, _ := decodeChunks(p, func() int { return 1 + r.IntN(64) })
		if want := reference(p); got != want {
			t.Fatalf("decode(%q) = %q, want %q", p, got, want)
		}
	}
}

// TestWindow: the window keeps the newest bytes, starts on a character
// boundary at most three bytes after head-size, and pages end on
// boundaries.
func TestWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	chars := []string{"a", "é", "€", "😀", "\r\n"}
	for _, size := range []int{64, 1000, 4096} {
		w := newWindow(size)
		var all strings.Builder
		for range 3000 {
			var b strings.Builder
			for range r.IntN(3 * size / 2) {
				if r.IntN(8) == 0 {
					b.WriteString(chars[r.IntN(len(chars))])
				} else {
					b.WriteByte('x')
				}
			}
			w.write([]byte(b.String()))
			all.WriteString(b.String())
			text := all.String()
			if w.head != int64(len(text)) {
				t.Fatalf("head %d, want %d", w.head, len(text))
			}
			low := max(0, w.head-int64(size))
			if w.start < low || w.start > low+3 || !utf8.RuneStart(text[w.start:][0:1][0]) && w.start < w.head {
				t.Fatalf("start %d for head %d, size %d", w.start, w.head, size)
			}
			if got := w.text(w.start, w.head); got != text[w.start:] {
				t.Fatalf("window text differs (size %d)", size)
			}
			if w.head > w.start {
				a := w.start + r.Int64N(w.head-w.start)
				a = w.ceil(a)
				e := w.floor(min(w.head, a+int64(r.IntN(size))))
				if e < a {
					e = a
				}
				if got := w.text(a, e); got != text[a:e] || !utf8.ValidString(got) {
					t.Fatalf("text(%d, %d) = %q", a, e, got)
				}
			}
		}
		w.free()
		if w.buf != nil || w.start != w.head {
			t.Fatal("free kept the storage")
		}
		w.write([]byte("late"))
		if w.start != w.head {
			t.Fatal("a freed window took a write")
		}
	}
}

// TestEncodeOutput: the hand-made terminal.output is byte for byte what
// the shared codec makes, and decodes with it.
func TestEncodeOutput(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var all []byte
	for c := range 0x80 {
		all = append(all, byte(c))
	}
	cases := []string{"", "plain", string(all), "é€😀\u2028\u2029<a href=\"x\">&amp;</a>\\", "\xe2\x80\xa8end"}
	for range 500 {
		var b strings.Builder
		for range r.IntN(100) {
			switch r.IntN(6) {
			case 0:
				b.WriteByte(byte(r.IntN(0x80)))
			case 1:
				b.WriteString("\u2028")
			case 2:
				b.WriteString("€😀")
			default:
				b.WriteString("text")
			}
		}
		cases = append(cases, b.String())
	}
	for _, data := range cases {
		got := encodeOutput("thr_aaaaaaaaaaaaaaaa", "term_bbbbbbbbbbbbbbbb", []byte(data), 12, 12+int64(len(data)))
		msg, err := rpc.NewNotification(NotifyOutput, OutputNotification{ThreadID: "thr_aaaaaaaaaaaaaaaa", TerminalID: "term_bbbbbbbbbbbbbbbb", Data: data, Offset: 12, NextOffset: 12 + int64(len(data))})
		if err != nil {
			t.Fatal(err)
		}
		want, err := rpc.Encode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("encodeOutput(%q)\n got %s\nwant %s", data, got, want)
		}
		if cap(got) != len(got) && cap(got)-len(got) > 40 {
			t.Fatalf("encodeOutput(%q): %d bytes in a buffer of %d", data, len(got), cap(got))
		}
		m, err := rpc.Decode(got)
		if err != nil || m.Method != NotifyOutput {
			t.Fatalf("decode: %v", err)
		}
	}
}
