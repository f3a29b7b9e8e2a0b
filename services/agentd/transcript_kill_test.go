package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// tryDial is dialSocket for a goroutine that must not fail the test: the
// connection to agentd, or the error.
func tryDial(ctx context.Context, sockPath string) (*rpc.Peer, error) {
	ws, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: sockPath, Path: "/rpc", Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	p := rpc.NewPeer(ws, rpc.PeerOptions{Handler: rpc.NewMux()})
	go func() { _ = p.Run() }()
	if err := p.Call(ctx, "initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "test", Version: "0"}}, nil); err != nil {
		p.Close(rpc.CloseNormal, "initialize failed")
		return nil, err
	}
	return p, nil
}

// transcriptsSize is the total length of the transcripts in dir.
func transcriptsSize(dir string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".jsonl") {
			n += fi.Size()
		}
	}
	return n
}

// TestTranscriptSIGKILLDuringAppends kills agentd (SIGKILL) again and
// again while a producer keeps turns with large records going, each kill
// the moment the transcripts grow (an append under way); the supervisor
// brings agentd back on the producer's next connection. Afterwards every
// transcript line is a whole record but for lines a kill tore, each of
// them followed by whole records (the next append ended it); every input
// agentd acknowledged is in its transcript exactly once, as is every turn
// boundary; and, once the last start has checked the transcripts against
// the database (appending the records of a batch committed and not yet
// appended at a kill), verify agrees with the database but for those torn
// lines.
func TestTranscriptSIGKILLDuringAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("kills agentd repeatedly")
	}
	// Restarts without the crash-loop back-off's growing waits.
	env := startWith(t, testConfig+"\n[supervisor]\nrestart_min_interval = \"50ms\"\nrestart_max_interval = \"100ms\"\n")
	c := dial(t, env)
	const nThreads, kills = 4, 8
	var threads []string
	for range nThreads {
		threads = append(threads, c.newThread("script").ID)
	}
	c.close()
	sessions := env.Layout("").SessionsDir()
	sock := env.Layout("").Socket(paths.AgentdSocket)
	// Large records make an append take long enough for a kill to land in
	// it: a turn writes its input, its agent message and its response.
	big := strings.Repeat("x", 24<<10)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	accepted := map[string]string{} // key → thread
	// fresh: the keys acknowledged as new, not as a resend's duplicate.
	// Their records were appended before the answer; a duplicate's may
	// have been torn or kept out of the transcript by a kill.
	fresh := map[string]bool{}
	var submitted, reconnects int
	var producer sync.WaitGroup
	producer.Go(func() {
		var p *rpc.Peer
		defer func() {
			if p != nil {
				p.Close(rpc.CloseNormal, "done")
			}
		}()
		for i := 0; ctx.Err() == nil; {
			if p == nil {
				var err error
				if p, err = tryDial(ctx, sock); err != nil {
					p = nil
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				mu.Lock()
				reconnects++
				mu.Unlock()
			}
			th, key := threads[i%nThreads], fmt.Sprintf("kill-%d", i)
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var r agentd.TurnSubmitResult
			err := p.Call(cctx, "turn/enqueue", map[string]any{"threadId": th, "messageId": key,
				"input": map[string]string{"text": fmt.Sprintf("say %d %s", i, big)}}, &r)
			cancel()
			if err != nil {
				// The outcome is unknown: the same key again (a resend is
				// the same turn), on a new connection.
				p.Close(rpc.CloseNormal, "retrying")
				p = nil
				continue
			}
			mu.Lock()
			accepted[key] = th
			fresh[key] = !r.Duplicate
			submitted++
			mu.Unlock()
			i++
		}
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return submitted }

	last := 0
	for k := range kills {
		// A few turns since the restart, then a random pause, then the
		// kill as soon as the transcripts grow.
		testkit.WaitFor(t, time.Minute, "turns after a restart", func() bool { return count() >= last+3 })
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		pid := agentdPID(t, env)
		if pid == 0 {
			t.Fatalf("kill %d: agentd is not running", k)
		}
		size := transcriptsSize(sessions)
		for deadline := time.Now().Add(5 * time.Second); transcriptsSize(sessions) == size && time.Now().Before(deadline); {
		}
		p, err := os.FindProcess(pid)
		if err == nil {
			err = p.Kill()
		}
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 30*time.Second, "agentd to die", func() bool { return !alive(pid) })
		last = count()
	}
	testkit.WaitFor(t, time.Minute, "turns after the last restart", func() bool { return count() >= last+3 })
	stop()
	producer.Wait()

	// One more turn in each thread after the last restart: every
	// transcript is appended to again.
	c = dial(t, env)
	for _, th := range threads {
		c.waitEnded(th, c.enqueue(th, "say after the kills").ID)
	}

	// The last start's check of the transcripts against the database
	// is done: what a kill kept out of them is appended.
	waitBackfilled(t, env, "")
	torn := 0
	for _, th := range threads {
		b, err := os.ReadFile(filepath.Join(sessions, th+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasSuffix(b, []byte("\n")) {
			t.Fatalf("%s does not end with a whole line", th)
		}
		lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
		inputs, queued, ended := map[string]int{}, map[string]int{}, map[string]int{}
		for n, line := range lines {
			var r api.TranscriptRecord
			if err := json.Unmarshal(line, &r); err != nil || r.Type == "" {
				if n == len(lines)-1 {
					t.Fatalf("%s: the last line is torn: appends did not resume after it", th)
				}
				torn++
				continue
			}
			switch r.Type {
			case api.RecordInput:
				inputs[r.Input.MessageID]++
			case api.RecordTurnQueued:
				queued[r.TurnID]++
			case api.RecordTurnEnded:
				ended[r.TurnID]++
			}
		}
		for _, m := range []map[string]int{inputs, queued, ended} {
			for id, n := range m {
				if n != 1 {
					t.Fatalf("%s: %s is in the transcript %d times", th, id, n)
				}
			}
		}
		mu.Lock()
		for key, kth := range accepted {
			if kth == th && fresh[key] && inputs[key] != 1 {
				t.Errorf("%s: the input %s, acknowledged as new, is not in the transcript", th, key)
			}
		}
		mu.Unlock()
	}
	if torn > kills {
		t.Fatalf("%d torn lines after %d kills", torn, kills)
	}
	itemKey := map[string]string{}
	mu.Lock()
	for key, th := range accepted {
		var r api.TurnInputReadResult
		c.must("turn/input/read", api.TurnInputReadParams{ThreadID: th, MessageID: key}, &r)
		if r.Item == nil {
			t.Fatalf("the acknowledged input %s has no receipt", key)
		}
		itemKey[r.Item.ID] = key
	}
	mu.Unlock()
	res, _ := verify(t, env, "")
	tornFound, notAppended := 0, 0
	for _, d := range res.Disagreements {
		switch d.Kind {
		case "tornLine":
			tornFound++
		case "missingInTranscript":
			// Committed, not yet appended at a kill: the next start
			// appends it.
			notAppended++
			t.Errorf("verify after the repair: %s %s %s: %s", d.ThreadID, d.TurnID, d.ItemID, d.Detail)
		default:
			t.Errorf("verify: %s %s %s %s: %s", d.Kind, d.ThreadID, d.TurnID, d.ItemID, d.Detail)
		}
	}
	if tornFound != torn {
		t.Errorf("verify reports %d torn lines; the files hold %d", tornFound, torn)
	}
	dups := 0
	for _, f := range fresh {
		if !f {
			dups++
		}
	}
	t.Logf("%d kills, %d turns acknowledged (%d of them as a resend's duplicate), %d connections; %d torn line(s), %d record(s) committed but not in a transcript; %d records checked",
		kills, len(accepted), dups, reconnects, torn, notAppended, res.Records)
}
