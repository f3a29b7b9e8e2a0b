//go:build linux

package termhost

import (
	"bytes"
	"encoding/json"
	"github.com/deepcode-dev/deepcode/shared/testkit"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"go.uber.org/goleak"
)

// TestRegistryReleasesEverything runs the terminal registry in this
// process: terminals that exit by themselves, are closed, ignore SIGHUP and
// SIGTERM, leave a background job holding the PTY after their leader
// exited, or are still running when the registry closes. Afterwards no
// goroutine is left and every descriptor is closed, and each terminal's
// output and exit were published once.
func TestRegistryReleasesEverything(t *testing.T) {
	// Warm up what the runtime opens once per process (the poller).
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		_ = ln.Close()
	}
	ignore := goleak.IgnoreCurrent()
	before := testkit.OpenFDs(t)

	var mu sync.Mutex
	var notes []map[string]any
	pub := newPublisher()
	pub.sink = func(b []byte) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Error(err)
		}
		mu.Lock()
		notes = append(notes, m)
		mu.Unlock()
	}
	go pub.run()
	reg := newRegistry(slog.New(slog.DiscardHandler), 8, 8, nil, pub)
	dir := t.TempDir()
	env := terminalEnv(os.Environ(), dir, nil)
	const thread = "thr_aaaaaaaaaaaaaaaa"
	start := func(argv ...string) *terminal {
		t.Helper()
		term, err := reg.create(spec{threadID: thread, argv: argv, command: argv, dir: dir, env: env, cols: 80, rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		return term
	}
	wait := func(term *terminal) {
		t.Helper()
		select {
		case <-term.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("terminal %v did not exit", term.command)
		}
	}
	natural := start("/bin/sh", "-c", "echo natural")
	closed := start("/bin/cat")
	stubborn := start("/bin/sh", "-c", "trap '' HUP TERM; sleep 1000 & echo ready; wait")
	// The leader exits; a background job that ignores SIGHUP keeps the PTY
	// open. The reader stops after exitDrain and closes the master anyway.
	orphaned := start("/bin/sh", "-c", "trap '' HUP; sleep 1000 & echo \"bg=$!\"")
	running := start("/bin/sh", "-c", "sleep 1000")

	wait(natural)
	// The traps are set before they are tested.
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := stubborn.read(0, readMax, -1)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(res.Data, "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stubborn terminal did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	closed.terminate()
	stubborn.terminate()
	wait(closed)
	wait(stubborn)
	wait(orphaned)
	res, err := orphaned.read(0, readMax, -1)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(res.Data, "bg="))); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	} else {
		t.Errorf("orphaned output %q", res.Data)
	}
	if n := reg.liveCount(); n != 1 {
		t.Fatalf("%d live terminals, want 1", n)
	}
	if !reg.close(nil) {
		t.Fatal("close timed out")
	}
	pub.close()
	wait(running)
	for _, term := range []*terminal{natural, closed, stubborn, orphaned, running} {
		if !term.evicted || term.win.buf != nil {
			t.Fatalf("terminal %v kept its window", term.command)
		}
	}
	if _, err := natural.read(0, readMax, -1); errs.CodeOf(err) != errs.NotFound {
		t.Fatalf("read after close: %v", err)
	}

	goleak.VerifyNone(t, ignore)
	if extra := testkit.NewFDs(before, testkit.OpenFDs(t)); len(extra) > 0 {
		t.Fatalf("descriptors left open: %v", extra)
	}
	mu.Lock()
	defer mu.Unlock()
	exits := map[string]float64{}
	var text bytes.Buffer
	for _, n := range notes {
		p := n["params"].(map[string]any)
		switch n["method"] {
		case NotifyExit:
			id := p["terminalId"].(string)
			if _, dup := exits[id]; dup {
				t.Fatalf("two exits for %s", id)
			}
			exits[id] = p["exitCode"].(float64)
		case NotifyOutput:
			if p["terminalId"] == natural.id {
				text.WriteString(p["data"].(string))
			}
		}
	}
	if len(exits) != 5 || exits[natural.id] != 0 || exits[closed.id] != 128+1 || exits[stubborn.id] != 128+9 || exits[running.id] != 128+1 {
		t.Fatalf("exits %v", exits)
	}
	if text.String() != "natural\r\n" {
		t.Fatalf("published %q", text.String())
	}
}
