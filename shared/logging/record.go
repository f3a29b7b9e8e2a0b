package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Record is one line of the service log read back: the TextHandler's
// key=value pairs, or a line that is not a record (a panic's trace, a race
// report, whatever a child printed to stderr), kept whole as Msg with Raw set.
type Record struct {
	Time    time.Time
	Level   string // DEBUG, INFO, WARN or ERROR ("" for a raw line)
	Service string
	Msg     string
	// Attrs are the other pairs, in the order they were written.
	Attrs []Attr
	// Raw is a line that is not a record; its Time is the record's before it.
	Raw bool
	// Line is the line as it was written.
	Line string
}

// Attr is one key and its value: a string, or (for an unquoted value that
// reads as one) a bool or a JSON number.
type Attr struct {
	Key   string
	Value any
}

// ParseRecord reads one line written by a handler from New. ok is false for
// a line that is not a record (it does not start with time=).
func ParseRecord(line string) (rec Record, ok bool) {
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "time=") {
		return Record{Msg: line, Raw: true, Line: line}, false
	}
	rec.Line = line
	seen := map[string]bool{}
	rest := line
	for rest != "" {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		key, r, _ := token(rest, true)
		if !strings.HasPrefix(r, "=") {
			// Not key=value: not a line this package wrote.
			return Record{Msg: line, Raw: true, Line: line}, false
		}
		val, r2, quoted := token(r[1:], false)
		rest = r2
		switch {
		case key == slog.TimeKey && rec.Time.IsZero():
			t, err := time.Parse(time.RFC3339Nano, val)
			if err != nil {
				return Record{Msg: line, Raw: true, Line: line}, false
			}
			rec.Time = t.UTC()
		case key == slog.LevelKey && rec.Level == "":
			rec.Level = val
		case key == slog.MessageKey && !seen[key]:
			rec.Msg = val
		case key == "service" && rec.Service == "":
			rec.Service = val
		default:
			if seen[key] {
				continue
			}
			rec.Attrs = append(rec.Attrs, Attr{Key: key, Value: typed(val, quoted)})
		}
		seen[key] = true
	}
	if rec.Time.IsZero() {
		return Record{Msg: line, Raw: true, Line: line}, false
	}
	return rec, true
}

// token reads a key (up to '=') or a value (up to ' '), either of which the
// TextHandler may have quoted with strconv.Quote.
func token(s string, isKey bool) (tok, rest string, quoted bool) {
	if strings.HasPrefix(s, `"`) {
		// Find the closing quote, skipping escapes.
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				if u, err := strconv.Unquote(s[:i+1]); err == nil {
					return u, s[i+1:], true
				}
				return s[1:i], s[i+1:], true
			}
		}
		return s[1:], "", true
	}
	stop := " "
	if isKey {
		stop = "= "
	}
	if i := strings.IndexAny(s, stop); i >= 0 {
		return s[:i], s[i:], false
	}
	return s, "", false
}

// typed gives an unquoted true, false or number its JSON type; anything
// else (and anything quoted) stays a string.
func typed(v string, quoted bool) any {
	if quoted {
		return v
	}
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	if v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid([]byte(v)) {
		return json.Number(v)
	}
	return v
}

// MarshalJSON writes time, level, service and msg first, then the attributes
// in their order; a raw line is {"time", "raw": true, "msg"}.
func (r Record) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	put := func(k string, v any) error {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(v)
		if err != nil {
			return err
		}
		b.Write(vb)
		return nil
	}
	if !r.Time.IsZero() {
		_ = put("time", r.Time.UTC().Format(time.RFC3339Nano))
	}
	if r.Raw {
		_ = put("raw", true)
	} else {
		_ = put("level", r.Level)
		_ = put("service", r.Service)
	}
	_ = put("msg", r.Msg)
	for _, a := range r.Attrs {
		switch a.Key {
		case "time", "level", "service", "msg", "raw":
			continue
		}
		if err := put(a.Key, a.Value); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Attr returns the value of the attribute key, or nil.
func (r Record) Attr(key string) any {
	for _, a := range r.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

// Filter selects records; a zero Filter selects all.
type Filter struct {
	// Since drops records before it.
	Since time.Time
	// MinLevel drops records below it (raw lines are kept: they are what a
	// crash printed).
	MinLevel *slog.Level
	// Services keeps records of these services, and the supervisor's records
	// about them (child=<name>); empty keeps all.
	Services []string
}

// Match reports whether r passes f.
func (f Filter) Match(r Record) bool {
	if !f.Since.IsZero() && r.Time.Before(f.Since) {
		return false
	}
	if f.MinLevel != nil && !r.Raw {
		var l slog.Level
		if err := l.UnmarshalText([]byte(r.Level)); err == nil && l < *f.MinLevel {
			return false
		}
	}
	if len(f.Services) > 0 {
		child, _ := r.Attr("child").(string)
		ok := false
		for _, s := range f.Services {
			if r.Service == s || child == s {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Records parses lines (oldest first), gives each raw line the time of the
// record before it, keeps those f selects and sorts them by time: records of
// different processes reach the file in the order they were copied, which
// is not quite the order they were made.
func Records(lines []string, f Filter) []Record {
	out := make([]Record, 0, len(lines))
	var last time.Time
	for _, l := range lines {
		r, ok := ParseRecord(l)
		if ok {
			last = r.Time
		} else {
			r.Time = last
		}
		if f.Match(r) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}
