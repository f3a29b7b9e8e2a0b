//go:build linux

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// BenchmarkGatewayThreadRead: thread/read round trips through the gateway
// to agentd over TCP WebSockets with 1, 8 and 32 connections working at
// once, against a bare gobwas/ws echo of a message of the same size with
// the same number of connections. Goal: p50 ≤ 2.5 × the echo's. The echo
// runs twice: in this process ("echo") and in a process of its own
// ("echoproc"), the transport's floor for an answer from another process,
// as the gateway's is (its answer comes from a third: agentd). The same
// reads sent straight to agentd's socket show how much of the gateway's
// figure is agentd's own ("agentd"), and what the gateway adds to it.
// "relayproc" is a bare relay process (one goroutine per connection, no
// JSON-RPC) in front of an echo process on a Unix socket: the transport's
// floor for the gateway's two hops.
// "floor" is the same path through the gateway to an agentd that does no
// work (the test service answering thread/read with the same bytes from
// memory): what a read through the gateway costs at the least.
func BenchmarkGatewayThreadRead(b *testing.B) {
	in := clienttest.Start(b)
	floorIn := clienttest.StartIn(b, testkit.NewEnv(b, testkit.BinariesWithFake(b)))
	setup := mustBiz(b, in)
	thread := setup.thread()
	turn := setup.startTurn(thread, "m1", "say a few words for the thread to read back")
	setup.waitTurn(thread, turn.ID, api.TurnCompleted)
	var sample json.RawMessage
	setup.must(api.MethodThreadRead, map[string]any{"threadId": thread}, &sample)
	echoAddrs := map[string]string{"echo": testkit.StartEcho(b, "tcp"), "echoproc": testkit.StartEchoProcess(b, "tcp"),
		"relayproc": testkit.StartRelayProcess(b, "tcp", "unix", testkit.StartEchoProcess(b, "unix"))}
	payload, err := rpc.Encode(&rpc.Message{ID: ptrID(rpc.NumberID(1)), Result: sample})
	if err != nil {
		b.Fatal(err)
	}
	fake, err := dialRPC(b, rpc.DialOptions{Network: "unix", Address: floorIn.Layout.Socket(paths.AgentdSocket), Path: "/rpc"})
	if err != nil {
		b.Fatal(err)
	}
	// The test service's own method, which the contract does not list.
	fake.countOnly.Store(true)
	fake.must("test/reply", map[string]any{"reply": sample}, nil)
	fake.close()
	perConn := max(b.N, 400)
	for _, n := range []int{1, 8, 32} {
		conns := []*biz{setup}
		for len(conns) < n {
			conns = append(conns, bizWhenFree(b, in))
		}
		run := func(op func(i int)) []time.Duration {
			var mu sync.Mutex
			var all []time.Duration
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					ds := make([]time.Duration, 0, perConn)
					for j := range perConn + 50 {
						t0 := time.Now()
						op(i)
						if j >= 50 { // warmed up
							ds = append(ds, time.Since(t0))
						}
					}
					mu.Lock()
					all = append(all, ds...)
					mu.Unlock()
				})
			}
			wg.Wait()
			return all
		}
		// reads runs the thread/read round trips on cs, checking that each
		// answer is as long as the real one, then closes cs[skip:].
		reads := func(cs []*biz, skip int) []time.Duration {
			ds := run(func(i int) {
				var got json.RawMessage
				if err := cs[i].call(api.MethodThreadRead, map[string]any{"threadId": thread}, &got); err != nil {
					b.Error(err)
				} else if len(got) != len(sample) {
					b.Errorf("thread/read answered %d bytes, not the %d of the real read", len(got), len(sample))
				}
			})
			for _, c := range cs[skip:] {
				c.close()
			}
			return ds
		}
		gw := reads(conns, len(conns)) // closed after the echoes
		for _, name := range []string{"echo", "echoproc", "relayproc"} {
			echoes := make([]*rpc.WSConn, n)
			for i := range echoes {
				c, err := rpc.Dial(context.Background(), rpc.DialOptions{Network: "tcp", Address: echoAddrs[name], Path: "/"})
				if err != nil {
					b.Fatal(err)
				}
				echoes[i] = c
			}
			echo := run(func(i int) {
				if err := echoes[i].WriteMessages([][]byte{payload}); err != nil {
					b.Error(err)
					return
				}
				if _, err := echoes[i].ReadMessage(); err != nil {
					b.Error(err)
				}
			})
			for _, e := range echoes {
				e.Close(rpc.CloseNormal, "")
			}
			gp50, ep50 := testkit.Percentile(gw, 50), testkit.Percentile(echo, 50)
			b.ReportMetric(ep50, fmt.Sprintf("µs-p50-%s-%dconn", name, n))
			b.ReportMetric(testkit.Percentile(echo, 99), fmt.Sprintf("µs-p99-%s-%dconn", name, n))
			b.ReportMetric(gp50/ep50, fmt.Sprintf("ratio-p50-%s-%dconn", name, n))
		}
		for _, c := range conns[1:] {
			c.close()
		}
		// The same reads sent to agentd's own socket: what agentd itself
		// takes, which the gateway's figure includes.
		direct := make([]*biz, n)
		for i := range direct {
			c, err := dialRPC(b, rpc.DialOptions{Network: "unix", Address: in.Layout.Socket(paths.AgentdSocket), Path: "/rpc"})
			if err != nil {
				b.Fatal(err)
			}
			c.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), nil)
			direct[i] = c
		}
		atAgentd := reads(direct, 0)
		floorConns := make([]*biz, n)
		for i := range floorConns {
			floorConns[i] = bizWhenFree(b, floorIn)
		}
		floor := reads(floorConns, 0)
		b.ReportMetric(testkit.Percentile(floor, 50), fmt.Sprintf("µs-p50-floor-%dconn", n))
		ap50 := testkit.Percentile(atAgentd, 50)
		b.ReportMetric(ap50, fmt.Sprintf("µs-p50-agentd-%dconn", n))
		b.ReportMetric(testkit.Percentile(gw, 50)-ap50, fmt.Sprintf("µs-p50-gateway-adds-%dconn", n))
		b.ReportMetric(testkit.Percentile(gw, 50), fmt.Sprintf("µs-p50-%dconn", n))
		b.ReportMetric(testkit.Percentile(gw, 99), fmt.Sprintf("µs-p99-%dconn", n))
	}
}

func ptrID(id rpc.ID) *rpc.ID { return &id }

// BenchmarkIdleConnectionMemory: the gateway's resident memory per idle,
// authenticated, initialized and subscribed connection. Goal ≤ 64 KiB.
// Measured across the gateway's whole capacity (31 connections beyond a
// first one that warms every path up).
func BenchmarkIdleConnectionMemory(b *testing.B) {
	in := clienttest.Start(b)
	pid := in.Status(b, in.TCP(), in.TCP().Client(b)).Services["gateway"].PID
	first := mustBiz(b, in)
	first.thread()
	// Warm up: open and close a full set once, so that the runtime's
	// one-time growth (stacks, buffers' size classes) is not counted.
	var warm []*biz
	for range 31 {
		warm = append(warm, mustBiz(b, in))
	}
	for _, c := range warm {
		c.close()
	}
	time.Sleep(time.Second)
	base := testkit.SettledRSS(b, pid)
	var conns []*biz
	for range 31 {
		conns = append(conns, mustBiz(b, in))
	}
	full := testkit.SettledRSS(b, pid)
	b.ReportMetric((full-base)/31/1024, "KiB/conn")
	b.ReportMetric(full/(1<<20), "MiB-gateway-rss")
	for _, c := range conns {
		c.close()
	}
}

// BenchmarkFanout: one turn emitting 10,000 events to 32 subscribed
// connections; notifications delivered per second from turn/start to the
// last connection's turn.completed. Goal ≥ 200,000/s. In the same run, the
// same turn with one subscriber: the rate agentd itself produces events.
func BenchmarkFanout(b *testing.B) {
	in := clienttest.Start(b)
	// The script provider streams eight words per delta: 80,000 words are
	// 10,000 delta events (plus the turn's and the item's own).
	words := strings.TrimSpace(strings.Repeat("w ", 80000))
	measure := func(n int, key string) (rate float64, perConn int64) {
		var conns []*biz
		for range n {
			c := bizWhenFree(b, in)
			c.countOnly.Store(true)
			conns = append(conns, c)
		}
		defer func() {
			for _, c := range conns {
				c.close()
			}
		}()
		thread := conns[0].thread()
		t0 := time.Now()
		turn := conns[0].startTurn(thread, key, "say "+words)
		conns[0].waitTurn(thread, turn.ID, api.TurnCompleted)
		// Every connection has all of the thread's events once it has the
		// last one (turn.completed is the turn's last event).
		var head struct {
			HeadSequence int64 `json:"headSequence"`
		}
		conns[0].must(api.MethodEventReplay, map[string]any{"threadId": thread, "after": 0, "maxBytes": 1024}, &head)
		for _, c := range conns {
			for {
				got := c.events.Load()
				if got >= head.HeadSequence {
					break
				}
				select {
				case <-c.peer.Done():
					b.Fatalf("a connection closed with %d of %d events: %v", got, head.HeadSequence, c.peer.Err())
				default:
				}
				if time.Since(t0) > 5*time.Minute {
					b.Fatalf("a connection has %d of %d events", got, head.HeadSequence)
				}
				time.Sleep(time.Millisecond)
			}
		}
		d := time.Since(t0)
		return float64(head.HeadSequence) * float64(n) / d.Seconds(), head.HeadSequence
	}
	for i := 0; i < max(1, b.N); i++ {
		one, _ := measure(1, fmt.Sprintf("one-%d", i))
		all, events := measure(32, fmt.Sprintf("all-%d", i))
		b.ReportMetric(all, "notifications/s-32conn")
		b.ReportMetric(one, "notifications/s-1conn")
		b.ReportMetric(float64(events), "events/turn")
	}
}

// bizWhenFree is mustBiz once the gateway has counted closed connections
// out (a close completes on the gateway a moment after the client's).
func bizWhenFree(b *testing.B, in *clienttest.Instance) *biz {
	b.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := dialBiz(b, in, in.Auth())
		if err == nil {
			c.must(api.MethodInitialize, initParams(buildinfo.ProtocolVersion), nil)
			return c
		}
		if time.Now().After(deadline) {
			b.Fatalf("dial /api/rpc: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
