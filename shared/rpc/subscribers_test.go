package rpc

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestSubscribersAddRemove(t *testing.T) {
	var s Subscribers[string]
	if n, added := s.Add("a"); n != 1 || !added {
		t.Fatalf("Add(a) = %d, %v; want 1, true", n, added)
	}
	if n, added := s.Add("a"); n != 1 || added {
		t.Fatalf("second Add(a) = %d, %v; want 1, false", n, added)
	}
	s.Add("b")
	before := s.List()
	if n, removed := s.Remove("a"); n != 1 || !removed {
		t.Fatalf("Remove(a) = %d, %v; want 1, true", n, removed)
	}
	// A list handed out earlier is never modified: a publisher may be
	// sending to it.
	if !slices.Equal(before, []string{"a", "b"}) {
		t.Fatalf("an earlier list changed to %v", before)
	}
	if n, removed := s.Remove("a"); n != 1 || removed {
		t.Fatalf("second Remove(a) = %d, %v; want 1, false", n, removed)
	}
	if got := s.List(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("List = %v, want [b]", got)
	}
}

// TestSubscribeUntilDone: a connection leaves the set when it ends, or when
// the publisher stops; Broadcast reaches every one that is subscribed.
func TestSubscribeUntilDone(t *testing.T) {
	srv := startServer(t, echoMux(), PeerOptions{})
	got := make(chan string, 4)
	h := NewMux()
	h.HandleFunc("hello", func(_ context.Context, req *Request) (any, error) {
		got <- string(req.Params)
		return nil, nil
	})
	srv.dialPeer(t, h)
	server := srv.serverPeer(t)

	var subs Subscribers[*Peer]
	stop := make(chan struct{})
	SubscribeUntilDone(&subs, server, stop)
	SubscribeUntilDone(&subs, server, stop) // once only
	SubscribeUntilDone(&subs, nil, stop)    // no connection: nothing
	if n := len(subs.List()); n != 1 {
		t.Fatalf("%d subscribers, want 1", n)
	}
	msg, err := NewNotification("hello", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	Broadcast(subs.List(), raw)
	select {
	case p := <-got:
		if p != `{"n":1}` {
			t.Fatalf("notification params %s", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broadcast did not arrive")
	}
	close(stop)
	waitFor(t, func() bool { return len(subs.List()) == 0 }, "the subscriber to leave when the publisher stops")

	SubscribeUntilDone(&subs, server, nil)
	server.Close(CloseNormal, "bye")
	waitFor(t, func() bool { return len(subs.List()) == 0 }, "the subscriber to leave when its connection ends")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
