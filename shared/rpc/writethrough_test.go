package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

// pattern is n bytes that tell where they came from, so a frame spliced
// into another shows.
func pattern(tag string, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(tag)
		b.WriteByte('.')
	}
	return b.String()[:n]
}

// TestWriteThroughKeepsFramesWhole: several goroutines notify a client
// that reads slowly and pings meanwhile, so that writes through the socket
// stop half-way and the writer goroutine finishes them while others queue.
// Every message must arrive whole and, per sender, in order.
func TestWriteThroughKeepsFramesWhole(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	sp := s.serverPeer(t)
	raw.next(ws.OpText) // the echo's answer

	const senders, each = 4, 24
	sizes := []int{10, 300 << 10, 70 << 10, 1, 130 << 10, 5 << 10}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				n := sizes[(g+i)%len(sizes)]
				tag := fmt.Sprintf("g%d-%d", g, i)
				if !sp.Notify("blob", map[string]any{"g": g, "i": i, "data": pattern(tag, n)}) {
					t.Errorf("notify %s refused: %v", tag, sp.Err())
					return
				}
			}
		}()
	}
	next := make([]int, senders)
	got := 0
	for got < senders*each {
		if got%5 == 0 {
			raw.send(ws.OpPing, true, []byte(fmt.Sprint(got)))
			time.Sleep(2 * time.Millisecond) // let the socket fill
		}
		f := raw.next(ws.OpText)
		var m struct {
			Params struct {
				G, I int
				Data string
			}
		}
		if err := json.Unmarshal(f.Payload, &m); err != nil {
			t.Fatalf("message %d is not JSON (%v): %.200s", got, err, f.Payload)
		}
		p := m.Params
		if p.G < 0 || p.G >= senders || p.I != next[p.G] {
			t.Fatalf("sender %d: message %d arrived, want %d", p.G, p.I, next[p.G])
		}
		n := sizes[(p.G+p.I)%len(sizes)]
		if p.Data != pattern(fmt.Sprintf("g%d-%d", p.G, p.I), n) {
			t.Fatalf("sender %d message %d: payload changed", p.G, p.I)
		}
		next[p.G]++
		got++
	}
	wg.Wait()
}

// TestClientWriteThroughMasksLargeFrames: a client peer (masked frames,
// some larger than its scratch buffer) calls from several goroutines at
// once; every answer must match its request.
func TestClientWriteThroughMasksLargeFrames(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	c := s.dialPeer(t, nil)
	sizes := []int{3, 200 << 10, 64 << 10, 65<<10 + 7, 900 << 10, 1 << 10}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				tag := fmt.Sprintf("c%d-%d", g, i)
				want := pattern(tag, sizes[(g+i)%len(sizes)])
				var got map[string]string
				if err := c.Call(context.Background(), "echo", map[string]string{"x": want}, &got); err != nil {
					t.Errorf("call %s: %v", tag, err)
					return
				}
				if got["x"] != want {
					t.Errorf("call %s: the answer differs", tag)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestEncodeDecodeBigResultRoundTrip: a result of the largest allowed size
// crosses the socket whole.
func TestEncodeDecodeBigResultRoundTrip(t *testing.T) {
	mux := NewMux()
	page := pattern("page", 900<<10)
	mux.HandleFunc("page", func(context.Context, *Request) (any, error) { return page, nil })
	s := startServer(t, mux, PeerOptions{})
	c := s.dialPeer(t, nil)
	for range 3 {
		var got json.RawMessage
		if err := c.Call(context.Background(), "page", nil, &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(`"`+page+`"`)) {
			t.Fatal("the page changed on the way")
		}
	}
}

// TestPeerWithoutWriteThrough: over a connection the write-through does not
// apply to (net.Pipe here; named pipes on Windows, wrapped sockets),
// every frame goes through the queue and the writer.
func TestPeerWithoutWriteThrough(t *testing.T) {
	a, b := net.Pipe()
	sc, cc := NewWSConn(a, nil, false, ConnOptions{}), NewWSConn(b, nil, true, ConnOptions{})
	if sc.canWriteThrough() || cc.canWriteThrough() {
		t.Fatal("net.Pipe should not be written through")
	}
	sp, cp := NewPeer(sc, PeerOptions{Handler: echoMux()}), NewPeer(cc, PeerOptions{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = sp.Run() })
	wg.Go(func() { _ = cp.Run() })
	var calls sync.WaitGroup
	for g := range 4 {
		calls.Go(func() {
			for i := range 20 {
				want := pattern(fmt.Sprintf("p%d-%d", g, i), (g*20+i)*997)
				var got map[string]string
				if err := cp.Call(context.Background(), "echo", map[string]string{"x": want}, &got); err != nil || got["x"] != want {
					t.Errorf("call %d/%d: %v", g, i, err)
					return
				}
			}
		})
	}
	calls.Wait()
	cp.Close(CloseNormal, "done")
	wg.Wait()
}
