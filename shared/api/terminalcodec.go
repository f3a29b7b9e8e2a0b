package api

import (
	"encoding/json"
	"strconv"

	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TerminalReadResult answers terminal/read.
type TerminalReadResult struct {
	Offset        int64  `json:"offset"`
	NextOffset    int64  `json:"nextOffset"`
	Data          string `json:"data"`
	AvailableFrom int64  `json:"availableFrom"`
	Truncated     bool   `json:"truncated"`
	HeadOffset    int64  `json:"headOffset"`
	HasMore       bool   `json:"hasMore"`
	Exited        bool   `json:"exited"`
	ExitCode      *int   `json:"exitCode,omitempty"`
}

// A TerminalReadResult carries up to 64 KiB of text. encoding/json looks at every
// byte of it several times (json.Marshal escapes byte by byte;
// json.Unmarshal checks the whole input, scans it again, then unquotes),
// which made the codec most of a page's round trip. AppendJSON and
// UnmarshalJSON produce and accept exactly what encoding/json does (see
// FuzzReadResultCodec), but move through plain text eight bytes at a time.

// terminalReadResultJSON is TerminalReadResult without its methods: encoding/json's own
// encoding, the reference and the fallback.
type terminalReadResultJSON TerminalReadResult

// terminalReadResultRoom is more than the members of a TerminalReadResult take beside the
// text: names, five integers, three booleans, quotes and braces.
const terminalReadResultRoom = 256

// AppendJSON appends r as json.Marshal encodes it (rpc.JSONAppender).
func (r TerminalReadResult) AppendJSON(b []byte) ([]byte, error) {
	// Room for the page once (plain text is copied as it is) and the
	// other members, instead of growing step by step. (slices.Grow would
	// zero the room first: a 64 KiB clear for nothing.)
	if need := len(r.Data) + terminalReadResultRoom; cap(b)-len(b) < need {
		nb := make([]byte, len(b), len(b)+need)
		copy(nb, b)
		b = nb
	}
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, `,"nextOffset":`...)
	b = strconv.AppendInt(b, r.NextOffset, 10)
	b = append(b, `,"data":`...)
	b = rpc.AppendString(b, r.Data)
	b = append(b, `,"availableFrom":`...)
	b = strconv.AppendInt(b, r.AvailableFrom, 10)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, r.Truncated)
	b = append(b, `,"headOffset":`...)
	b = strconv.AppendInt(b, r.HeadOffset, 10)
	b = append(b, `,"hasMore":`...)
	b = strconv.AppendBool(b, r.HasMore)
	b = append(b, `,"exited":`...)
	b = strconv.AppendBool(b, r.Exited)
	if r.ExitCode != nil {
		b = append(b, `,"exitCode":`...)
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	return append(b, '}'), nil
}

// The members of a TerminalReadResult, as bits of a set.
const (
	fOffset = 1 << iota
	fNextOffset
	fData
	fAvailableFrom
	fTruncated
	fHeadOffset
	fHasMore
	fExited
	fExitCode
)

// UnmarshalJSON decodes data as json.Unmarshal decodes it into a
// TerminalReadResult without this method. The fast path takes an object whose
// names are exactly the members' (each at most once, in any order) with
// integers, booleans and a string as values; anything else (null, other
// spellings of a name, unknown members, fractions, errors) is left to
// encoding/json itself. Nothing is stored unless the whole value decodes,
// and members that are absent are left as they are, as json.Unmarshal does.
func (r *TerminalReadResult) UnmarshalJSON(data []byte) error {
	// Decoded into a copy, stored whole at the end: absent members keep
	// their values, and nothing is stored if the fast path gives up.
	v := *r
	var exitCode int64
	var seen int
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return r.fallback(data)
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			// A name without escapes.
			if i >= len(data) || data[i] != '"' {
				return r.fallback(data)
			}
			j := i + 1
			for j < len(data) && data[j] != '"' && data[j] != '\\' && data[j] >= 0x20 {
				j++
			}
			if j >= len(data) || data[j] != '"' {
				return r.fallback(data)
			}
			name := data[i+1 : j]
			i = skipSpace(data, j+1)
			if i >= len(data) || data[i] != ':' {
				return r.fallback(data)
			}
			i = skipSpace(data, i+1)
			var f int
			var ok bool
			switch string(name) {
			case "offset":
				f = fOffset
				v.Offset, i, ok = readInt(data, i)
			case "nextOffset":
				f = fNextOffset
				v.NextOffset, i, ok = readInt(data, i)
			case "data":
				f = fData
				if i < len(data) && data[i] == '"' {
					var n int
					v.Data, n, ok = rpc.UnquoteString(data[i:])
					i += n
				}
			case "availableFrom":
				f = fAvailableFrom
				v.AvailableFrom, i, ok = readInt(data, i)
			case "truncated":
				f = fTruncated
				v.Truncated, i, ok = readBool(data, i)
			case "headOffset":
				f = fHeadOffset
				v.HeadOffset, i, ok = readInt(data, i)
			case "hasMore":
				f = fHasMore
				v.HasMore, i, ok = readBool(data, i)
			case "exited":
				f = fExited
				v.Exited, i, ok = readBool(data, i)
			case "exitCode":
				f = fExitCode
				exitCode, i, ok = readInt(data, i)
				// int is narrower than int64 on 32-bit platforms.
				ok = ok && int64(int(exitCode)) == exitCode
			}
			if !ok || seen&f != 0 {
				return r.fallback(data)
			}
			seen |= f
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				i++
				break
			}
			return r.fallback(data)
		}
	}
	if skipSpace(data, i) != len(data) {
		return r.fallback(data)
	}
	if seen&fExitCode != 0 {
		// As json.Unmarshal does, a pointer already set is written through.
		if v.ExitCode == nil {
			v.ExitCode = new(int)
		}
		*v.ExitCode = int(exitCode)
	}
	*r = v
	return nil
}

// fallback decodes with encoding/json, errors included.
func (r *TerminalReadResult) fallback(data []byte) error {
	return json.Unmarshal(data, (*terminalReadResultJSON)(r))
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// readInt reads an integer that JSON and strconv.ParseInt agree on: an
// optional minus, then 0 or digits without a leading zero, not followed by
// a fraction or an exponent, within int64.
func readInt(data []byte, i int) (int64, int, bool) {
	start := i
	if i < len(data) && data[i] == '-' {
		i++
	}
	digits := i
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	if i == digits || data[digits] == '0' && i-digits > 1 {
		return 0, 0, false
	}
	if i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(data[start:i]), 10, 64)
	return n, i, err == nil
}

func readBool(data []byte, i int) (bool, int, bool) {
	switch {
	case len(data)-i >= 4 && string(data[i:i+4]) == "true":
		return true, i + 4, true
	case len(data)-i >= 5 && string(data[i:i+5]) == "false":
		return false, i + 5, true
	}
	return false, 0, false
}
