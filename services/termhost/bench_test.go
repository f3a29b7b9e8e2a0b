//go:build linux

package termhost_test

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/deepcode-dev/deepcode/services/termhost"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

const benchBytes = 256 << 20

// benchCommand writes benchBytes of ASCII to its terminal.
var benchCommand = []string{"/bin/sh", "-c", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, benchBytes)}

// rawPTY runs benchCommand on a PTY opened in this process and copies its
// output to io.Discard: the limit the machine itself sets.
func rawPTY(b *testing.B) time.Duration {
	b.Helper()
	t0 := time.Now()
	cmd := exec.Command(benchCommand[0], benchCommand[1:]...)
	m, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, m)
	if err != nil && !errors.Is(err, syscall.EIO) {
		b.Fatal(err)
	}
	_ = cmd.Wait()
	_ = m.Close()
	d := time.Since(t0)
	if n != benchBytes {
		b.Fatalf("raw copy read %d bytes", n)
	}
	return d
}

// viaTermhost runs benchCommand in a termhost terminal and waits until it
// has exited with all its output in the window.
func viaTermhost(b *testing.B, c *conn, thread string) time.Duration {
	b.Helper()
	t0 := time.Now()
	id := c.create(thread, benchCommand...)
	for {
		var r termhost.ReadResult
		c.must(api.MethodTerminalRead, map[string]any{"threadId": thread, "terminalId": id, "offset": 0, "through": 0}, &r)
		if r.Exited {
			if r.HeadOffset != benchBytes {
				b.Fatalf("termhost took %d bytes", r.HeadOffset)
			}
			return time.Since(t0)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkPTYThroughput: 256 MiB written by a child into the retained
// window, against a raw PTY copy in the same run. The goal is 200
// MB/s; DESIGN.md lowers it to 0.8 of the raw copy where the machine
// cannot do that. "subscribed" adds a client that receives terminal.output.
func BenchmarkPTYThroughput(b *testing.B) {
	env := testkit.NewEnv(b, testkit.Binaries(b))
	env.MustRun("service", "start", "--port", "0")
	defer env.Run("service", "stop", "--drain=false")
	thread, _ := newThread(b, env)
	plain := dialTermhost(b, env, false)
	mbs := func(d time.Duration) float64 { return float64(benchBytes) / 1e6 / d.Seconds() }
	// The machine's load changes between runs: raw and termhost alternate,
	// three rounds per iteration, and the medians are reported.
	var raw, th, thSub, ratio, ratioSub []float64
	b.ResetTimer()
	for range b.N {
		for range 3 {
			r := mbs(rawPTY(b))
			x := mbs(viaTermhost(b, plain, thread))
			sub := dialTermhost(b, env, true) // a client receiving terminal.output
			y := mbs(viaTermhost(b, sub, thread))
			sub.close()
			raw, th, thSub = append(raw, r), append(th, x), append(thSub, y)
			ratio, ratioSub = append(ratio, x/r), append(ratioSub, y/r)
		}
	}
	b.StopTimer()
	b.ReportMetric(median(raw), "MB/s-raw")
	b.ReportMetric(median(th), "MB/s-termhost")
	b.ReportMetric(median(thSub), "MB/s-subscribed")
	b.ReportMetric(median(ratio), "ratio")
	b.ReportMetric(median(ratioSub), "ratio-subscribed")
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkRead64K: terminal/read of a 64 KiB page over termhost.sock.
// Goal p50 ≤ 300 µs. In the same run: an empty terminal/read (the RPC
// round trip itself) and a bare WebSocket echo of a message of the same
// size (the transport's limit, without JSON-RPC).
func BenchmarkRead64K(b *testing.B) {
	env := testkit.NewEnv(b, testkit.Binaries(b))
	env.MustRun("service", "start", "--port", "0")
	defer env.Run("service", "stop", "--drain=false")
	thread, _ := newThread(b, env)
	c := dialTermhost(b, env, false)
	id := c.create(thread, "/bin/sh", "-c", `head -c 100000 /dev/zero | tr '\0' a`)
	c.waitExited(thread, id)
	page := map[string]any{"threadId": thread, "terminalId": id, "offset": 0, "limit": 64 << 10}
	empty := map[string]any{"threadId": thread, "terminalId": id, "offset": 0, "through": 0}
	echo := testkit.DialEcho(b, "unix", testkit.StartEcho(b, "unix"))
	var r termhost.ReadResult
	c.must(api.MethodTerminalRead, page, &r)
	msg, err := rpc.Encode(&rpc.Message{ID: ptr(rpc.NumberID(1)), Result: []byte(`{"data":"` + r.Data + `"}`)})
	if err != nil || len(r.Data) != 64<<10 {
		b.Fatal(err, len(r.Data))
	}
	// The codec's share, in this process: what termhost does to answer
	// with the page (rpc.NewResult, rpc.Encode) and what the client does
	// with it (rpc.Decode, then Peer.Call's rpc.UnmarshalResult).
	id1 := rpc.NumberID(1)
	codec := func() (enc, dec time.Duration) {
		t0 := time.Now()
		m, err := rpc.NewResult(&id1, r)
		if err != nil {
			b.Fatal(err)
		}
		raw, err := rpc.Encode(m)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		d, err := rpc.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		var back termhost.ReadResult
		if err := rpc.UnmarshalResult(d.Result, &back); err != nil {
			b.Fatal(err)
		}
		return t1.Sub(t0), time.Since(t1)
	}
	n := max(b.N, 2000)
	var reads, calls, echoes, encs, decs []time.Duration
	for i := range n + 100 {
		t0 := time.Now()
		c.must(api.MethodTerminalRead, page, &r)
		t1 := time.Now()
		c.must(api.MethodTerminalRead, empty, nil)
		t2 := time.Now()
		echo(msg)
		t3 := time.Now()
		enc, dec := codec()
		if i >= 100 { // warmed up
			reads = append(reads, t1.Sub(t0))
			calls = append(calls, t2.Sub(t1))
			echoes = append(echoes, t3.Sub(t2))
			encs, decs = append(encs, enc), append(decs, dec)
		}
	}
	b.ReportMetric(testkit.Percentile(reads, 50), "µs-p50-read64K")
	b.ReportMetric(testkit.Percentile(reads, 99), "µs-p99-read64K")
	b.ReportMetric(testkit.Percentile(calls, 50), "µs-p50-emptyread")
	b.ReportMetric(testkit.Percentile(echoes, 50), "µs-p50-wsecho64K")
	b.ReportMetric(testkit.Percentile(encs, 50), "µs-p50-encode64K")
	b.ReportMetric(testkit.Percentile(decs, 50), "µs-p50-decode64K")
}

// BenchmarkMemory: termhost's resident memory idle, then with eight live
// and eight exited full windows. Goal: at most 6 MiB more than idle.
// "idle-cold" is termhost just started; "idle" is after a small terminal has
// run, been notified and read a few hundred times: the code those paths
// touch is resident and the collector has run (its first cycles allocate
// most of its metadata), as in any termhost that has served a while. The
// small window is evicted by the exited ones later.
func BenchmarkMemory(b *testing.B) {
	for range b.N {
		env := testkit.NewEnv(b, testkit.Binaries(b))
		env.MustRun("service", "start", "--port", "0")
		thread, _ := newThread(b, env)
		c := dialTermhost(b, env, true)
		pid := health(b, env).PID
		cold := testkit.SettledRSS(b, pid)
		warm := c.create(thread, "/bin/sh", "-c", `head -c 20000 /dev/zero | tr '\0' w`)
		c.waitExited(thread, warm)
		for range 300 {
			c.read(thread, warm, 0, 64<<10, nil)
		}
		c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, nil)
		idle := testkit.SettledRSS(b, pid)
		// The terminals are followed through their notifications, as a
		// client would, rather than by polling reads.
		full := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, 300000)
		for range 8 {
			c.waitExit(c.create(thread, "/bin/sh", "-c", full))
		}
		var live []string
		for range 8 {
			id := c.create(thread, "/bin/sh", "-c", full+"; exec cat")
			c.waitNotified(id, 300000)
			live = append(live, id)
		}
		var list termhost.ListResult
		c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, &list)
		fullWindows := 0
		for _, in := range list.Terminals {
			if in.HeadOffset >= 256<<10 {
				fullWindows++
			}
		}
		if fullWindows != 16 || len(list.Terminals) != 16 {
			b.Fatalf("%d full windows of %d, want 16", fullWindows, len(list.Terminals))
		}
		loaded := testkit.SettledRSS(b, pid)
		// Then every full window goes: the live terminals are closed and
		// eight tiny exited windows evict them.
		for _, id := range live {
			c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, nil)
		}
		for range 8 {
			c.waitExit(c.create(thread, "/bin/true"))
		}
		after := testkit.SettledRSS(b, pid)
		b.ReportMetric(cold/(1<<20), "MiB-idle-cold")
		b.ReportMetric(idle/(1<<20), "MiB-idle")
		b.ReportMetric(loaded/(1<<20), "MiB-16-windows")
		b.ReportMetric((loaded-idle)/(1<<20), "MiB-beyond-idle")
		b.ReportMetric((loaded-cold)/(1<<20), "MiB-beyond-idle-cold")
		b.ReportMetric((loaded-after)/(1<<20), "MiB-freed-by-eviction")
		env.Run("service", "stop", "--drain=false")
	}
}

// waitNotified waits until terminal.output notified id's output up to at
// least head.
func (c *conn) waitNotified(id string, head int64) {
	c.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		c.mu.Lock()
		for _, n := range c.out {
			if n.TerminalID == id && n.NextOffset >= head {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-deadline:
			c.t.Fatalf("output of %s not notified up to %d", id, head)
		}
	}
}
