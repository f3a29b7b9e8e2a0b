package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
)

func testLane() *LaneOptions {
	return &LaneOptions{Frames: 64, Bytes: 8 << 20, HighFrames: 16, LowFrames: 8, HighBytes: 2 << 20, LowBytes: 1 << 20,
		StallAfter: 200 * time.Millisecond, ChunkFrames: 8, ChunkBytes: 64 << 10}
}

// TestLaneDeliversInOrderBesideAnswers: notifications queued on the lane
// arrive once each and in order while the same connection's calls are
// answered, one writer writing both; a fan-out that waits when told to
// never overflows a client that reads.
func TestLaneDeliversInOrderBesideAnswers(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{Lane: testLane()})
	var mu sync.Mutex
	var got []int
	h := NewMux()
	h.HandleFunc("n", func(_ context.Context, req *Request) (any, error) {
		var p struct{ N int }
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		got = append(got, p.N)
		mu.Unlock()
		return nil, nil
	})
	// The client takes what arrives without a bound of its own: the test
	// is of the server's lane.
	conn, err := Dial(context.Background(), DialOptions{Network: "unix", Address: s.sock, Path: "/rpc"})
	if err != nil {
		t.Fatal(err)
	}
	client := NewPeer(conn, PeerOptions{Handler: h, InboundFrames: 1 << 16, InboundBytes: 1 << 30})
	ran := make(chan struct{})
	go func() { defer close(ran); _ = client.Run() }()
	t.Cleanup(func() { client.Close(CloseNormal, "bye"); <-ran })
	sp := s.serverPeer(t)

	const total = 3000
	calls := make(chan error, 1)
	go func() {
		for i := 0; i < 200; i++ {
			var out map[string]any
			if err := client.Call(context.Background(), "echo", map[string]int{"i": i}, &out); err != nil {
				calls <- err
				return
			}
			if out["i"] != float64(i) {
				calls <- fmt.Errorf("call %d answered %v", i, out)
				return
			}
		}
		calls <- nil
	}()
	for i := 0; i < total; i++ {
		msg, _ := NewNotification("n", map[string]int{"n": i})
		b, _ := Encode(msg)
		if sp.QueueNotification(b) {
			sp.WaitNotifications()
		}
	}
	if err := <-calls; err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d notifications arrived (peer: %v)", n, total, sp.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("notification %d is %d: out of order", i, n)
		}
	}
}

// TestLaneNonReaderIsLaggingThenClosedWith1013: for a client that reads
// nothing the fan-out waits once, about StallAfter, then not again; the
// lane then fills and the connection is closed with 1013, after which
// nothing more is queued.
func TestLaneNonReaderIsLaggingThenClosedWith1013(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{Lane: testLane()})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	sp := s.serverPeer(t)
	msg, _ := NewNotification("blob", map[string]string{"blob": strings.Repeat("z", 60<<10)})
	b, _ := Encode(msg)
	waits := 0
	for queued := 0; ; queued++ {
		select {
		case <-sp.Done():
		default:
			if sp.QueueNotification(b) {
				waits++
				done := make(chan struct{})
				go func() { sp.WaitNotifications(); close(done) }()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("WaitNotifications never gave up on a client that reads nothing")
				}
			}
			if queued > 100000 {
				t.Fatal("a client that never reads was never cut off")
			}
			continue
		}
		break
	}
	if waits == 0 {
		t.Fatal("the fan-out was never told to wait")
	}
	var ce *CloseError
	if !errors.As(sp.Err(), &ce) || ce.Code != CloseTryAgainLater {
		t.Fatalf("peer ended with %v, want close 1013", sp.Err())
	}
	if sp.QueueNotification(b) {
		t.Fatal("a closed peer asks the fan-out to wait")
	}
	sp.WaitNotifications() // returns at once: the lane is gone
	raw.expectClose(CloseTryAgainLater)
}

// TestLaneDroppedOnClose: Close drops queued notifications (clients
// replay what they missed) and queues no more; the answer queued before
// it and the close frame are still written.
func TestLaneDroppedOnClose(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{Lane: testLane()})
	raw := s.dialRaw(t)
	raw.text(`{"jsonrpc":"2.0","id":1,"method":"echo"}`)
	sp := s.serverPeer(t)
	raw.next(ws.OpText) // the answer
	sp.Close(CloseNormal, "bye")
	msg, _ := NewNotification("n", map[string]int{"n": 1})
	b, _ := Encode(msg)
	if sp.QueueNotification(b) {
		t.Fatal("a closed peer asks the fan-out to wait")
	}
	raw.expectClose(CloseNormal)
}

// TestNoLaneQueuesAsSendRaw: a peer without a lane takes notifications
// on its one queue.
func TestNoLaneQueuesAsSendRaw(t *testing.T) {
	s := startServer(t, echoMux(), PeerOptions{})
	got := make(chan string, 1)
	h := NewMux()
	h.HandleFunc("n", func(_ context.Context, req *Request) (any, error) { got <- string(req.Params); return nil, nil })
	s.dialPeer(t, h)
	sp := s.serverPeer(t)
	msg, _ := NewNotification("n", map[string]int{"n": 7})
	b, _ := Encode(msg)
	if sp.QueueNotification(b) {
		t.Fatal("a peer without a lane asks the fan-out to wait")
	}
	sp.WaitNotifications()
	select {
	case p := <-got:
		if p != `{"n":7}` {
			t.Fatalf("params %s", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the notification did not arrive")
	}
}
