package rpc

import (
	"strings"
	"testing"
)

// BenchmarkDecode64K: the client's strict decode of a terminal/read answer
// carrying a 64 KiB page, with the single-pass scanner (Decode) and with the
// json.Decoder token walk it replaced (decodeReference). "ascii" is the page
// the termhost benchmark reads (one letter repeated); "terminal" has what a
// shell prints: escapes, line ends and non-ASCII text, most of it escaped
// in JSON.
func BenchmarkDecode64K(b *testing.B) {
	type readResult struct {
		Offset     int64  `json:"offset"`
		NextOffset int64  `json:"nextOffset"`
		Data       string `json:"data"`
		HasMore    bool   `json:"hasMore"`
		Exited     bool   `json:"exited"`
	}
	line := "\x1b[1;32muser@host\x1b[0m:\x1b[1;34m~/src/deepcode\x1b[0m$ ls -la  — écrit à 12:00\r\n"
	pages := []struct{ name, data string }{
		{"ascii", strings.Repeat("a", 64<<10)},
		{"terminal", strings.Repeat(line, (64<<10)/len(line)+1)[:64<<10]},
	}
	id := NumberID(1)
	for _, page := range pages {
		m, err := NewResult(&id, readResult{Offset: 0, NextOffset: 64 << 10, Data: page.data, HasMore: true})
		if err != nil {
			b.Fatal(err)
		}
		msg, err := Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		for _, impl := range []struct {
			name   string
			decode func([]byte) (*Message, error)
		}{{"reference", decodeReference}, {"scanner", Decode}} {
			b.Run(impl.name+"/"+page.name, func(b *testing.B) {
				b.SetBytes(int64(len(msg)))
				b.ReportAllocs()
				for b.Loop() {
					d, err := impl.decode(msg)
					if err != nil || len(d.Result) == 0 {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
