package rpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// This file is Decode's scanner: one pass over the message checks its
// syntax and splits its members, and a second walk over "params" alone
// (usually small; it is the only value checked for nested duplicates)
// finds repeated names. Together they accept exactly what the json.Decoder
// token walks they replace accepted (reference_test.go keeps those walks,
// and FuzzDecodeMatchesReference compares the two):
//
//   - the grammar of encoding/json: whitespace is space, tab, CR and LF;
//     strings may hold any byte from 0x20 up except '"' and '\' (invalid
//     UTF-8 is accepted, as json.Valid accepts it); escapes are \" \\ \/ \b
//     \f \n \r \t and \uXXXX; numbers are -?(0|[1-9][0-9]*)(.[0-9]+)?
//     ([eE][+-]?[0-9]+)?; a member's value may nest at most 10,000 levels;
//   - names compare after unescaping the way encoding/json unescapes them
//     (invalid UTF-8 and lone surrogates become U+FFFD), so "a" and
//     "\u0061" are the same name;
//   - errors come in the order the token walk met them: a member's value
//     is scanned completely before its name is checked against the earlier
//     names, and a duplicate top-level member is reported even if bytes
//     after it are not JSON;
//   - duplicate names nested inside "params" are reported by Decode after
//     the member checks, as before. Other members ("result", "error") are
//     not checked for nested duplicates, as before: a 64 KiB result is
//     read once.
//
// Member values are returned as slices of the input: nothing is copied.

// maxNesting is encoding/json's nesting limit for one value.
const maxNesting = 10000

// member is one top-level member: its unescaped name and its value, a slice
// of the input without surrounding whitespace.
type member struct {
	name  string
	value []byte
}

var errSyntax = errors.New("message is not valid JSON")

// linearKeys is how many names an object keeps in a slice before it
// switches to a map for duplicate checks.
const linearKeys = 16

// scanObject splits data, which starts with '{' and has no whitespace
// around it, into its members, appended to members. A repeated top-level
// name is a duplicateMemberError; anything that is not one JSON object is
// errSyntax.
func scanObject(data []byte, members []member) ([]member, error) {
	// index replaces the linear search once there are many members (a
	// hostile message may carry thousands of unknown ones).
	var index map[string]struct{}
	i := skipSpace(data, 1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return nil, errSyntax
			}
			end, ok := scanString(data, i)
			if !ok {
				return nil, errSyntax
			}
			name := memberName(data[i:end])
			i = skipSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return nil, errSyntax
			}
			i = skipSpace(data, i+1)
			start := i
			if i, ok = scanValue(data, i); !ok {
				return nil, errSyntax
			}
			// The name is checked once its value has been read, as the
			// token walk did.
			if index != nil {
				if _, dup := index[name]; dup {
					return nil, duplicateMemberError(name)
				}
				index[name] = struct{}{}
			} else {
				for _, m := range members {
					if m.name == name {
						return nil, duplicateMemberError(name)
					}
				}
				if len(members) == linearKeys {
					index = make(map[string]struct{}, 4*linearKeys)
					for _, m := range members {
						index[m.name] = struct{}{}
					}
					index[name] = struct{}{}
				}
			}
			members = append(members, member{name: name, value: data[start:i]})
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return nil, errSyntax
		}
	}
	if i != len(data) {
		return nil, errSyntax // data after the object
	}
	return members, nil
}

// memberName unescapes a top-level name (a valid JSON string with its
// quotes), reusing constant strings for the names a message may carry.
func memberName(raw []byte) string {
	switch string(raw) {
	case `"jsonrpc"`:
		return "jsonrpc"
	case `"id"`:
		return "id"
	case `"method"`:
		return "method"
	case `"params"`:
		return "params"
	case `"result"`:
		return "result"
	case `"error"`:
		return "error"
	}
	return string(unquote(raw))
}

// unquote returns the value of a valid JSON string literal as encoding/json
// decodes it. Plain strings (no escapes, valid UTF-8) are returned as a
// slice of raw; others take encoding/json's own path.
func unquote(raw []byte) []byte {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		// Unreachable: raw was scanned as a string.
		return raw
	}
	return []byte(s)
}

// stringValue decodes a raw member value that must be a JSON string, as
// json.Unmarshal into a string would. ok is false when raw is not a
// string (Decode rejects those: null leaves the target empty, and empty
// is as invalid as a type error there).
func stringValue(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	return string(unquote(raw)), true
}

// scanValue returns the index just past the value starting at data[i], or
// false if it is not a JSON value. Whitespace after the value is not
// consumed.
func scanValue(data []byte, i int) (int, bool) {
	var room [32]byte
	kinds := room[:0] // open containers, '{' or '['
	var ok bool
value:
	if i >= len(data) {
		return 0, false
	}
	switch data[i] {
	case '{', '[':
		if len(kinds) >= maxNesting {
			return 0, false
		}
		kinds = append(kinds, data[i])
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == kinds[len(kinds)-1]+2 { // '}' or ']'
			i++
			kinds = kinds[:len(kinds)-1]
			goto next
		}
		if kinds[len(kinds)-1] == '{' {
			goto key
		}
		goto value
	case '"':
		if i, ok = scanString(data, i); !ok {
			return 0, false
		}
	case 't':
		if !hasLiteral(data, i, "true") {
			return 0, false
		}
		i += 4
	case 'f':
		if !hasLiteral(data, i, "false") {
			return 0, false
		}
		i += 5
	case 'n':
		if !hasLiteral(data, i, "null") {
			return 0, false
		}
		i += 4
	default:
		if i, ok = scanNumber(data, i); !ok {
			return 0, false
		}
	}
next:
	// A value has ended at i: close containers or move to the next element.
	if len(kinds) == 0 {
		return i, true
	}
	i = skipSpace(data, i)
	if i >= len(data) {
		return 0, false
	}
	switch data[i] {
	case ',':
		i = skipSpace(data, i+1)
		if kinds[len(kinds)-1] == '{' {
			goto key
		}
		goto value
	case kinds[len(kinds)-1] + 2: // '}' or ']'
		i++
		kinds = kinds[:len(kinds)-1]
		goto next
	}
	return 0, false
key:
	// i is at an object member's name.
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	if i, ok = scanString(data, i); !ok {
		return 0, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return 0, false
	}
	i = skipSpace(data, i+1)
	goto value
}

// firstDuplicateKey walks raw, a value scanValue accepted, and returns the
// first name repeated within one of its objects, in document order, as the
// token walk reported it (unescaped).
func firstDuplicateKey(raw []byte) (string, bool) {
	if bytes.IndexByte(raw, '{') < 0 {
		return "", false
	}
	// keys holds the names of the open objects, stacked; objs says where
	// each object's names start, or holds them in a map once it is large.
	type frame struct {
		start int
		set   map[string]struct{}
	}
	var keyRoom [2 * linearKeys][]byte
	var objRoom [8]frame
	keys, objs := keyRoom[:0], objRoom[:0]
	for i := 0; i < len(raw); {
		switch c := raw[i]; c {
		case '{':
			objs = append(objs, frame{start: len(keys)})
			i++
		case '}':
			f := objs[len(objs)-1]
			clear(keys[f.start:])
			keys, objs = keys[:f.start], objs[:len(objs)-1]
			i++
		case '"':
			end, _ := scanString(raw, i)
			j := skipSpace(raw, end)
			if j < len(raw) && raw[j] == ':' { // a name
				k := unquote(raw[i:end])
				f := &objs[len(objs)-1]
				if f.set != nil {
					if _, dup := f.set[string(k)]; dup {
						return string(k), true
					}
					f.set[string(k)] = struct{}{}
				} else {
					for _, seen := range keys[f.start:] {
						if bytes.Equal(seen, k) {
							return string(k), true
						}
					}
					keys = append(keys, k)
					if len(keys)-f.start > linearKeys {
						f.set = make(map[string]struct{}, 4*linearKeys)
						for _, seen := range keys[f.start:] {
							f.set[string(seen)] = struct{}{}
						}
						clear(keys[f.start:])
						keys = keys[:f.start]
					}
				}
			}
			i = end
		default:
			i++
		}
	}
	return "", false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber returns the index just past the number starting at data[i].
// Like encoding/json, it stops at the first byte that cannot continue a
// complete number; that byte is the caller's to judge.
func scanNumber(data []byte, i int) (int, bool) {
	if data[i] == '-' {
		i++
		if i >= len(data) {
			return 0, false
		}
	}
	switch c := data[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return 0, false
		}
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	}
	return i, true
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// scanString returns the index just past the string whose opening quote is
// data[i]. Long plain runs are found with bytes.IndexByte (vector
// instructions): the next quote ends the string unless a backslash comes
// first, and the bytes in between are checked for control characters
// eight at a time.
func scanString(data []byte, i int) (int, bool) {
	end, _, ok := scanStringEscapes(data, i)
	return end, ok
}

// scanStringEscapes is scanString that also reports whether the string
// holds an escape.
func scanStringEscapes(data []byte, i int) (end int, escaped, ok bool) {
	i++
	q := -1 // the next quote at or after i, once found
	for {
		if q < i {
			q = bytes.IndexByte(data[i:], '"')
			if q < 0 {
				return 0, escaped, false
			}
			q += i
		}
		seg := data[i:q]
		b := bytes.IndexByte(seg, '\\')
		if b < 0 {
			if hasControl(seg) {
				return 0, escaped, false
			}
			return q + 1, escaped, true
		}
		if hasControl(seg[:b]) {
			return 0, escaped, false
		}
		i += b
		escaped = true
		// data[i] is a backslash before q, so data[i+1] exists.
		switch data[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if len(data)-i < 6 || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) || !isHex(data[i+5]) {
				return 0, escaped, false
			}
			i += 6
		default:
			return 0, escaped, false
		}
	}
}

// hasControl reports whether p holds a byte below 0x20, which a JSON
// string cannot hold unescaped.
func hasControl(p []byte) bool {
	i := 0
	for ; len(p)-i >= 32; i += 32 {
		a := binary.LittleEndian.Uint64(p[i:])
		b := binary.LittleEndian.Uint64(p[i+8:])
		c := binary.LittleEndian.Uint64(p[i+16:])
		d := binary.LittleEndian.Uint64(p[i+24:])
		if ((a-ones*0x20)&^a|(b-ones*0x20)&^b|(c-ones*0x20)&^c|(d-ones*0x20)&^d)&highs != 0 {
			return true
		}
	}
	for ; len(p)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(p[i:])
		if (x-ones*0x20)&^x&highs != 0 {
			return true
		}
	}
	for ; i < len(p); i++ {
		if p[i] < 0x20 {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// nestingExceeds reports whether data opens more than limit objects or
// arrays inside one another, counting brackets outside strings. It runs only
// on a message the scanner refused, to tell "too deep" from "not JSON"; a
// message that is both is reported as too deep, which is true of it.
func nestingExceeds(data []byte, limit int) bool {
	depth := 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}
