package rpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// This file is a JSON string codec for large texts (a 64 KiB terminal
// page): AppendString writes exactly what json.Marshal writes for a
// string, and UnquoteString reads exactly what json.Unmarshal reads into
// one, but both skip eight plain bytes at a time where encoding/json
// looks at every byte (and json.Unmarshal scans its whole input twice
// before it decodes). jsonstr_test.go fuzzes both against encoding/json.

// JSONAppender is a value that encodes itself: AppendJSON appends to b
// exactly the bytes json.Marshal would produce for the value. NewResult
// uses it instead of json.Marshal, which would scan the output again.
type JSONAppender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// Verbatim is a result that is already one valid JSON value: another
// service's answer passed on as the strict decoder accepted it (the
// gateway's forwarding). NewResult writes it as it is, where json.Marshal
// would scan the whole answer again (up to a message's 1 MiB) to validate
// and compact it.
type Verbatim []byte

// AppendJSON implements JSONAppender.
func (v Verbatim) AppendJSON(b []byte) ([]byte, error) { return append(b, v...), nil }

const hexDigits = "0123456789abcdef"

// htmlPlainWord reports whether json.Marshal copies the eight bytes of x
// unchanged: printable ASCII without '"', '\', '<', '>' and '&'. Each
// test finds a zero byte: (v-ones)&^v has the high bit of a byte set, for
// some byte, exactly when some byte of v is zero. '"' (0x22) and '&'
// (0x26) differ in one bit, as do '<' (0x3c) and '>' (0x3e).
func htmlPlainWord(x uint64) bool {
	qa := (x | ones*0x04) ^ (ones * 0x26) // '"' or '&'
	lg := (x | ones*0x02) ^ (ones * 0x3e) // '<' or '>'
	bs := x ^ (ones * '\\')
	return (x|(x-ones*0x20)&^x|(qa-ones)&^qa|(lg-ones)&^lg|(bs-ones)&^bs)&highs == 0
}

// AppendString appends s as a JSON string, exactly as json.Marshal
// encodes a string: '"', '\' and control characters escaped (\b \f \n \r
// \t by name, the others as \u00XX), '<', '>' and '&' as \u003c, \u003e
// and \u0026, U+2028 and U+2029 as \u2028 and \u2029, and each byte of
// invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// A read-only view of s, for eight-byte loads.
	sb := unsafe.Slice(unsafe.StringData(s), len(s))
	start, i := 0, 0
	tried := 0 // chunks before this index were tried whole
	for i < len(s) {
		// Whole chunks without a byte to escape, checked with vector
		// searches; a chunk that has one is not tried again.
		for i >= tried && len(sb)-i >= plainChunk {
			if !htmlPlainChunk(sb[i : i+plainChunk]) {
				tried = i + plainChunk
				break
			}
			i += plainChunk
		}
		for len(sb)-i >= 16 && htmlPlainWord(binary.LittleEndian.Uint64(sb[i:])) && htmlPlainWord(binary.LittleEndian.Uint64(sb[i+8:])) {
			i += 16
		}
		for len(sb)-i >= 8 && htmlPlainWord(binary.LittleEndian.Uint64(sb[i:])) {
			i += 8
		}
		// At most eight bytes one at a time, up to and past a special one.
		for stop := min(i+8, len(s)); i < stop; {
			c := s[i]
			if c < utf8.RuneSelf {
				if htmlSafe(c) {
					i++
					continue
				}
				dst = append(dst, s[start:i]...)
				switch c {
				case '\\', '"':
					dst = append(dst, '\\', c)
				case '\b':
					dst = append(dst, '\\', 'b')
				case '\f':
					dst = append(dst, '\\', 'f')
				case '\n':
					dst = append(dst, '\\', 'n')
				case '\r':
					dst = append(dst, '\\', 'r')
				case '\t':
					dst = append(dst, '\\', 't')
				default:
					dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
				}
				i++
				start = i
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			switch {
			case r == utf8.RuneError && size == 1:
				dst = append(dst, s[start:i]...)
				dst = append(dst, `\ufffd`...)
			case r == '\u2028' || r == '\u2029':
				dst = append(dst, s[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			default:
				i += size
				continue
			}
			i += size
			start = i
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainChunk is how many bytes AppendString checks at once with
// htmlPlainChunk.
const plainChunk = 512

// htmlPlainChunk reports whether json.Marshal copies p unchanged: ASCII
// without control characters (eight bytes at a time), and none of the five
// characters it escapes (bytes.IndexByte, in vector instructions).
func htmlPlainChunk(p []byte) bool {
	var acc uint64
	for i := 0; len(p)-i >= 32; i += 32 {
		a := binary.LittleEndian.Uint64(p[i:])
		b := binary.LittleEndian.Uint64(p[i+8:])
		c := binary.LittleEndian.Uint64(p[i+16:])
		d := binary.LittleEndian.Uint64(p[i+24:])
		acc |= a | b | c | d | (a-ones*0x20)&^a | (b-ones*0x20)&^b | (c-ones*0x20)&^c | (d-ones*0x20)&^d
	}
	return acc&highs == 0 && bytes.IndexByte(p, '"') < 0 && bytes.IndexByte(p, '\\') < 0 &&
		bytes.IndexByte(p, '<') < 0 && bytes.IndexByte(p, '>') < 0 && bytes.IndexByte(p, '&') < 0
}

// htmlSafe reports whether json.Marshal copies the ASCII byte c unchanged.
func htmlSafe(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c < utf8.RuneSelf
}

// UnquoteString reads the JSON string literal that starts data (data[0]
// must be '"') and returns its value as json.Unmarshal would decode it
// into a string (invalid UTF-8 and lone surrogates become U+FFFD), and
// the index just past its closing quote. ok is false when data does not
// start with a valid JSON string literal.
func UnquoteString(data []byte) (s string, n int, ok bool) {
	if len(data) == 0 || data[0] != '"' {
		return "", 0, false
	}
	end, escaped, ok := scanStringEscapes(data, 0)
	if !ok {
		return "", 0, false
	}
	inner := data[1 : end-1]
	if !escaped && utf8.Valid(inner) {
		return string(inner), end, true
	}
	return string(unescape(inner)), end, true
}

// unescape decodes the inside of a string literal that scanString
// accepted, as encoding/json's unquote does. Runs of plain ASCII and of
// valid UTF-8 are copied whole.
func unescape(s []byte) []byte {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	start, r := 0, 0
	for r < len(s) {
		c := s[r]
		if c < utf8.RuneSelf && c != '\\' {
			// The next backslash or non-ASCII byte, eight bytes at a time.
			for len(s)-r >= 8 {
				x := binary.LittleEndian.Uint64(s[r:])
				bs := x ^ (ones * '\\')
				if (x|(bs-ones)&^bs)&highs != 0 {
					break
				}
				r += 8
			}
			for r < len(s) && s[r] < utf8.RuneSelf && s[r] != '\\' {
				r++
			}
			continue
		}
		if c >= utf8.RuneSelf {
			rr, size := utf8.DecodeRune(s[r:])
			if rr != utf8.RuneError || size != 1 {
				r += size // valid UTF-8 stays in the run
				continue
			}
			b = append(b, s[start:r]...)
			b = append(b, "\uFFFD"...)
			r++
			start = r
			continue
		}
		// A backslash: the escapes scanString checked.
		b = append(b, s[start:r]...)
		switch s[r+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			rr := hex4(s[r+2 : r+6])
			r += 6
			if utf16.IsSurrogate(rr) {
				if len(s)-r >= 6 && s[r] == '\\' && s[r+1] == 'u' {
					if dec := utf16.DecodeRune(rr, hex4(s[r+2:r+6])); dec != unicode.ReplacementChar {
						b = utf8.AppendRune(b, dec)
						r += 6
						start = r
						continue
					}
				}
				rr = unicode.ReplacementChar
			}
			b = utf8.AppendRune(b, rr)
			start = r
			continue
		default: // '"', '\\', '/'
			b = append(b, s[r+1])
		}
		r += 2
		start = r
	}
	return append(b, s[start:]...)
}

// hex4 reads four hex digits that scanString checked.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// UnmarshalResult stores raw, a valid JSON value (a Result as Decode
// returns it), in v as json.Unmarshal does. A json.Unmarshaler is handed
// raw directly: json.Unmarshal would first check all of raw, then scan it
// again to find its end, which for a 64 KiB page costs more than decoding
// it. Peer.Call uses it for every answer.
func UnmarshalResult(raw json.RawMessage, v any) error {
	if u, ok := v.(json.Unmarshaler); ok && len(raw) > 0 {
		// json.Unmarshal needs a non-nil pointer, then calls the method
		// on it with the whole value, null included.
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
			return u.UnmarshalJSON(raw)
		}
	}
	return json.Unmarshal(raw, v)
}
