package agentd_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

// BenchmarkNativeTurn measures the deepcode provider against the fake
// model (Chat Completions), in one run: what a turn through deepcode
// (client → agentd → model request → durable events → turn.completed) adds
// over the same request sent to the fake model directly (paired,
// alternating order, as BenchmarkRuntimeTurn; goal ≤ 1 ms at the median),
// the cold first turn of a fresh agentd (no model connection yet; goal ≤
// 20 ms), and agentd's RSS growth while 8 native turns run at once (goal ≤
// 10 MiB):
//
//	go test -run '^$' -bench BenchmarkNativeTurn -benchtime 200x ./services/agentd
func BenchmarkNativeTurn(b *testing.B) {
	model, err := fakemodel.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer model.Close()
	env := testkit.NewEnv(b, testkit.Binaries(b))
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		b.Fatal(err)
	}
	cfg := fmt.Sprintf("[profiles.native]\nprovider = \"deepcode\"\napi = \"chat\"\nbase_url = %q\nmodel = \"fake-model\"\napproval_policy = \"auto\"\n", model.URL+"/v1")
	if err := os.WriteFile(paths.ConfigFile(env.Home), []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	env.MustRun("service", "start", "--port", "0")
	defer env.Run("service", "stop", "--cancel-running", "--timeout", "10")

	ctx := context.Background()
	ws, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: env.Layout("").Socket(paths.AgentdSocket), Path: "/rpc", Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ended := make(chan agentd.Event, 1024)
	peer := rpc.NewPeer(ws, rpc.PeerOptions{Handler: benchMux(ended), InboundFrames: 1 << 16, InboundBytes: 64 << 20})
	go func() { _ = peer.Run() }()
	defer peer.Close(rpc.CloseNormal, "bench over")
	c := &benchClient{tb: b, peer: peer, ended: ended}
	c.call("initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "bench", Version: "0"}}, nil)
	var st struct {
		Services map[string]struct{ PID int } `json:"services"`
	}
	env.MustRun("service", "status", "--json").JSON(b, &st)
	agentdPID := st.Services["agentd"].PID
	wsDir := b.TempDir()
	const prompt = "say hi"

	// Cold: the first turn of this agentd (no model client, no kept-alive
	// connection, nothing cached), then the first turns of new threads.
	th := c.thread(wsDir, "native")
	coldFirst := c.turn(th, prompt)
	var newThread []time.Duration
	for range 5 {
		newThread = append(newThread, c.turn(c.thread(wsDir, "native"), prompt))
	}
	scriptTh := c.thread(wsDir, "script")
	c.turn(scriptTh, prompt)

	// The floor: the same request straight to the fake model, streamed
	// to its end, over a kept-alive connection.
	client := &http.Client{}
	body := `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"say hi"}]}`
	direct := func() time.Duration {
		start := time.Now()
		resp, err := client.Post(model.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "data: [DONE]" {
				break
			}
		}
		resp.Body.Close()
		return time.Since(start)
	}
	direct()

	rest := rssMiB(agentdPID)
	var via, straight, script []time.Duration
	var cpuNative, cpuScript time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var d, s time.Duration
		// A thread of its own for each measured turn: the model gets the
		// same one message as the direct request (a thread's later turns
		// send its whole history, as they must).
		fresh := c.thread(wsDir, "native")
		c0 := cpuTime(agentdPID)
		if i%2 == 0 {
			d = c.turn(fresh, prompt)
			s = direct()
		} else {
			s = direct()
			d = c.turn(fresh, prompt)
		}
		c1 := cpuTime(agentdPID)
		script = append(script, c.turn(scriptTh, prompt))
		c2 := cpuTime(agentdPID)
		via, straight = append(via, d), append(straight, s)
		cpuNative, cpuScript = cpuNative+c1-c0, cpuScript+c2-c1
	}
	b.StopTimer()
	var first, second []time.Duration
	for i := range via {
		if i%2 == 0 {
			first = append(first, via[i]-straight[i])
		} else {
			second = append(second, via[i]-straight[i])
		}
	}
	added := median(first)
	if len(second) > 0 {
		added = (median(first) + median(second)) / 2
	}

	// 8 turns at once, each streaming for a while: agentd's RSS growth.
	var peak float64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				peak = max(peak, rssMiB(agentdPID))
			}
		}
	}()
	var threads []string
	for range 8 {
		threads = append(threads, c.thread(wsDir, "native"))
	}
	before := rssMiB(agentdPID)
	var turns sync.WaitGroup
	for _, t := range threads {
		turns.Add(1)
		go func() {
			defer turns.Done()
			var r agentd.TurnSubmitResult
			c.call("turn/start", map[string]any{"threadId": t, "messageId": fmt.Sprintf("c-%s", t), "input": map[string]string{"text": "slow 20ms\nsay " + strings.Repeat("word ", 50)}}, &r)
		}()
	}
	turns.Wait()
	for n := 0; n < 8; {
		select {
		case <-ended:
			n++
		case <-time.After(2 * time.Minute):
			b.Fatal("the concurrent turns did not end")
		}
	}
	close(stop)
	sampler.Wait()

	b.ReportMetric(ms(added), "added-ms/turn")
	b.ReportMetric(ms(median(via)), "deepcode-ms/turn")
	b.ReportMetric(ms(median(straight)), "direct-ms/turn")
	b.ReportMetric(ms(median(script)), "script-ms/turn")
	b.ReportMetric(ms(cpuNative)/float64(b.N), "agentd-cpu-ms/turn")
	b.ReportMetric(ms(cpuScript)/float64(b.N), "agentd-cpu-ms/script-turn")
	b.ReportMetric(ms(coldFirst), "cold-first-ms/turn")
	b.ReportMetric(ms(median(newThread)), "new-thread-ms/turn")
	b.ReportMetric(peak-before, "rss-growth-8-turns-MiB")
	b.Logf("native: median turn through deepcode %.2f ms, the request direct %.2f ms: deepcode adds %.2f ms (goal ≤ 1; a script turn through deepcode %.2f ms); cold first turn of a fresh agentd %.1f ms (goal ≤ 20), first turn of a new thread %.1f ms; agentd RSS %.1f MiB at rest, %.1f MiB before and %.1f MiB at the peak of 8 concurrent turns (+%.1f MiB; goal ≤ 10)",
		ms(median(via)), ms(median(straight)), ms(added), ms(median(script)), ms(coldFirst), ms(median(newThread)), rest, before, peak, peak-before)
}
