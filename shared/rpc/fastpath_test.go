package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInlineKeepsOrder: a request for an inline method that arrives while
// another handler runs waits for it (it is queued, not run by the reader),
// and the reader still reads meanwhile: the running handler's own call to
// the client is answered.
func TestInlineKeepsOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	release := make(chan struct{})
	mux := NewMux()
	mux.HandleFunc("slow", func(ctx context.Context, req *Request) (any, error) {
		record("slow start")
		var who string
		if err := req.Peer.Call(ctx, "whoami", nil, &who); err != nil {
			return nil, err
		}
		<-release
		record("slow end " + who)
		return "slow", nil
	})
	mux.HandleInline("testInlineFast", HandlerFunc(func(context.Context, *Request) (any, error) {
		record("fast")
		return "fast", nil
	}))
	s := startServer(t, mux, PeerOptions{})
	cmux := NewMux()
	cmux.HandleFunc("whoami", func(context.Context, *Request) (any, error) { return "client", nil })
	c := s.dialPeer(t, cmux)
	ctx := context.Background()
	// Inline on an idle connection.
	var out string
	if err := c.Call(ctx, "testInlineFast", nil, &out); err != nil || out != "fast" {
		t.Fatal(out, err)
	}
	slowDone := make(chan error, 1)
	go func() { slowDone <- c.Call(ctx, "slow", nil, nil) }()
	for {
		mu.Lock()
		started := len(order) == 2
		mu.Unlock()
		if started {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fastDone := make(chan error, 1)
	go func() { fastDone <- c.Call(ctx, "testInlineFast", nil, nil) }()
	select {
	case err := <-fastDone:
		t.Fatalf("the inline request ran while another handler was running (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	if err := <-fastDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"fast", "slow start", "slow end client", "fast"}
	if strings.Join(order, "|") != strings.Join(want, "|") {
		t.Fatalf("order %q, want %q", order, want)
	}
}

// TestInlineNotWithExecutor: with an Executor, inline methods go through
// the dispatcher (acquiring a slot may wait) and still hold a slot.
func TestInlineNotWithExecutor(t *testing.T) {
	sem := NewSemaphore(1)
	mux := NewMux()
	mux.HandleInline("testInlineExec", HandlerFunc(func(context.Context, *Request) (any, error) {
		if len(sem) != 1 {
			t.Error("the handler ran without an executor slot")
		}
		return 1, nil
	}))
	s := startServer(t, mux, PeerOptions{Executor: sem})
	c := s.dialPeer(t, nil)
	var n int
	if err := c.Call(context.Background(), "testInlineExec", nil, &n); err != nil || n != 1 {
		t.Fatal(n, err)
	}
}

// TestRecycledFramesKeepResults: answers read into a recycled buffer do
// not change what earlier calls returned.
func TestRecycledFramesKeepResults(t *testing.T) {
	mux := NewMux()
	mux.HandleFunc("page", func(_ context.Context, req *Request) (any, error) {
		var p struct{ C string }
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		return map[string]string{"data": strings.Repeat(p.C, 64<<10)}, nil
	})
	s := startServer(t, mux, PeerOptions{})
	c := s.dialPeer(t, nil)
	ctx := context.Background()
	var strs []map[string]string
	var raws []json.RawMessage
	for _, ch := range []string{"a", "b", "c", "d"} {
		var m map[string]string
		if err := c.Call(ctx, "page", map[string]string{"C": ch}, &m); err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := c.Call(ctx, "page", map[string]string{"C": ch}, &raw); err != nil {
			t.Fatal(err)
		}
		strs, raws = append(strs, m), append(raws, raw)
	}
	for i, ch := range []string{"a", "b", "c", "d"} {
		want := strings.Repeat(ch, 64<<10)
		if strs[i]["data"] != want {
			t.Fatalf("result %d changed", i)
		}
		if !bytes.Equal(raws[i], []byte(`{"data":"`+want+`"}`)) {
			t.Fatalf("raw result %d changed", i)
		}
	}
}

// TestFrameBuffer: a recycled buffer is reused only for a large message
// that fits, and only once.
func TestFrameBuffer(t *testing.T) {
	c := &WSConn{}
	if b := c.frameBuffer(minRecycled); len(b) != minRecycled {
		t.Fatal(len(b))
	}
	buf := make([]byte, 70000)
	c.Recycle(buf)
	if b := c.frameBuffer(100); &b[0] == &buf[0] {
		t.Fatal("a small message took the recycled buffer")
	}
	b := c.frameBuffer(65000)
	if len(b) != 65000 || &b[0] != &buf[0] {
		t.Fatal("the recycled buffer was not reused")
	}
	if b2 := c.frameBuffer(65000); &b2[0] == &buf[0] {
		t.Fatal("the recycled buffer was handed out twice")
	}
	c.Recycle(make([]byte, maxRecycled+1))
	if c.recycled.Load() != nil {
		t.Fatal("an oversized buffer was kept")
	}
	c.Recycle(make([]byte, 100))
	if c.recycled.Load() != nil {
		t.Fatal("a small buffer was kept")
	}
}

// appender is a JSONAppender whose encoding is json.Marshal's.
type appender struct{ V map[string]any }

func (a appender) AppendJSON(b []byte) ([]byte, error) {
	v, err := json.Marshal(a.V)
	return append(b, v...), err
}

// TestNewResultAppender: a JSONAppender's response encodes as
// json.Marshal's would, before and after its id or result is replaced.
func TestNewResultAppender(t *testing.T) {
	val := map[string]any{"data": "x\r\ny <&>", "n": 1}
	for _, id := range []*ID{ptrTo(NumberID(7)), ptrTo(StringID("a\"b")), nil} {
		m, err := NewResult(id, appender{val})
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := NewResult(id, val)
		got, _ := Encode(m)
		want, _ := Encode(ref)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s\nwant %s", got, want)
		}
		other := NumberID(8)
		m.ID = &other
		ref.ID = &other
		got, _ = Encode(m)
		want, _ = Encode(ref)
		if !bytes.Equal(got, want) {
			t.Fatalf("after a new id: %s\nwant %s", got, want)
		}
		m.Result = json.RawMessage(`{"other":true}`)
		got, _ = Encode(m)
		if !bytes.Equal(got, []byte(`{"jsonrpc":"2.0","id":8,"result":{"other":true}}`)) {
			t.Fatalf("after a new result: %s", got)
		}
	}
	// A result spanning lines is compacted by Encode, as before.
	m, _ := NewResult(ptrTo(NumberID(1)), rawAppender("{\n\"a\": 1}"))
	if got, _ := Encode(m); !bytes.Equal(got, []byte(`{"jsonrpc":"2.0","id":1,"result":{"a":1}}`)) {
		t.Fatalf("%s", got)
	}
}

type rawAppender string

func (r rawAppender) AppendJSON(b []byte) ([]byte, error) { return append(b, r...), nil }

func ptrTo[T any](v T) *T { return &v }

// A Verbatim result goes on the wire byte for byte, and an empty one is
// refused rather than sent as a response without a result.
func TestVerbatimResult(t *testing.T) {
	id := NumberID(7)
	in := `{"thread":{"id":"thr_1","title":"<b>&"},"turns":[1,2.5e3,null,"\u00e9"]}`
	m, err := NewResult(&id, Verbatim(in))
	if err != nil {
		t.Fatal(err)
	}
	wire, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"jsonrpc":"2.0","id":7,"result":` + in + `}`; string(wire) != want {
		t.Fatalf("wire %s\nwant %s", wire, want)
	}
	back, err := Decode(wire)
	if err != nil || string(back.Result) != in {
		t.Fatalf("decoded %s, %v", back.Result, err)
	}
	if _, err := NewResult(&id, Verbatim(nil)); err == nil {
		t.Fatal("an empty Verbatim result was accepted")
	}
}
