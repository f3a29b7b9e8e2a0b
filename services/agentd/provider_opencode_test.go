package agentd_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	agentrt "github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestOpenCode drives the real OpenCode CLI (opencode serve, HTTP and
// server-sent events) through agentd against the fake model server's Chat
// Completions API.
func TestOpenCode(t *testing.T) {
	rig := runtimeSuite(t, "opencode")
	if t.Failed() {
		return
	}

	t.Run("turns back to back on one thread", func(t *testing.T) {
		// Queued at once, the turns run one right after the other on the
		// warm runtime: a turn may end on its prompt's answer, before
		// opencode has published the prompt's last events (an idle among
		// them); none may reach the next turn.
		c := dial(t, rig.env)
		th := c.newThread("opencode")
		first := c.start(th.ID, "say back to back zero")
		c.waitEnded(th.ID, first.ID)
		var turns []agentd.Turn
		for i := 1; i <= 4; i++ {
			turns = append(turns, c.enqueue(th.ID, fmt.Sprintf("say back to back %d", i)))
		}
		for i, turn := range turns {
			want := fmt.Sprintf("back to back %d", i+1)
			done := c.waitEnded(th.ID, turn.ID)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != want {
				t.Fatalf("turn %d: %+v %+v", i+1, done.Turn, done.Turn.Error)
			}
			if msgs := messages(t, done.Items); len(msgs) != 1 || msgs[0] != want {
				t.Fatalf("turn %d: agent messages %q, want exactly %q", i+1, msgs, want)
			}
			checkItemsEnded(t, done.Items, agentd.ItemCompleted)
			if len(itemsOf(done.Items, agentd.KindTokenUsage)) != 1 {
				t.Errorf("turn %d: token usage items %+v", i+1, itemsOf(done.Items, agentd.KindTokenUsage))
			}
		}
		// Each turn's request carried the previous turns (one session).
		reqs := rig.model.Requests()
		if last := reqs[len(reqs)-1]; !strings.Contains(last.Transcript, "back to back 3") {
			t.Fatalf("the last turn's request lacks the previous turns: %q", last.Transcript)
		}
		checkSettled(t, rig)
	})

	t.Run("multi-step turn records both steps", func(t *testing.T) {
		// The model calls a tool (approved by policy), then answers: the
		// first step's items come before the final message's creation,
		// the final message from the events or the prompt's answer.
		c := dial(t, rig.env)
		ws := t.TempDir()
		th := c.newThreadIn(ws, "opencode-auto")
		for i := range 2 {
			turn := c.start(th.ID, fmt.Sprintf("say I will run it %d\nshell echo step%d > step%d.txt\nsay command %d done", i, i, i, i))
			done := c.waitEnded(th.ID, turn.ID)
			want := fmt.Sprintf("command %d done", i)
			if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != want {
				t.Fatalf("turn %d: %+v %+v", i, done.Turn, done.Turn.Error)
			}
			if msgs := messages(t, done.Items); len(msgs) != 2 || msgs[0] != fmt.Sprintf("I will run it %d", i) || msgs[1] != want {
				t.Fatalf("turn %d: agent messages %q", i, msgs)
			}
			cmds := itemsOf(done.Items, agentd.KindCommandExecution)
			if len(cmds) != 1 {
				t.Fatalf("turn %d: command items %+v", i, cmds)
			}
			var cmd agentrt.CommandPayload
			decode(t, cmds[0].Payload, &cmd)
			if len(cmd.Command) == 0 || !strings.Contains(cmd.Command[0], fmt.Sprintf("step%d.txt", i)) || cmd.ExitCode == nil || *cmd.ExitCode != 0 {
				t.Fatalf("turn %d: command item %s", i, cmds[0].Payload)
			}
			checkItemsEnded(t, done.Items, agentd.ItemCompleted)
			// The items are in order: the first step's message and
			// command, then the final message.
			var order []string
			for _, it := range done.Items {
				if it.Kind == agentd.KindAgentMessage || it.Kind == agentd.KindCommandExecution {
					order = append(order, it.Kind)
				}
			}
			if fmt.Sprint(order) != fmt.Sprint([]string{agentd.KindAgentMessage, agentd.KindCommandExecution, agentd.KindAgentMessage}) {
				t.Fatalf("turn %d: item order %v", i, order)
			}
			if b, err := os.ReadFile(filepath.Join(ws, fmt.Sprintf("step%d.txt", i))); err != nil || strings.TrimSpace(string(b)) != fmt.Sprintf("step%d", i) {
				t.Fatalf("turn %d: the command did not run: %q %v", i, b, err)
			}
		}
		checkSettled(t, rig)
	})

	t.Run("private TMPDIR removed with the runtime", func(t *testing.T) {
		c := dial(t, rig.env)
		th := c.newThread("opencode")
		turn := c.start(th.ID, "say warm")
		c.waitEnded(th.ID, turn.ID)
		pids := rig.runtimePIDs()
		if len(pids) == 0 {
			t.Fatal("no warm runtime")
		}
		if runtime.GOOS == "linux" {
			// Each runtime has its own TMPDIR, inside agentd's.
			seen := map[string]bool{}
			for _, pid := range pids {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				if err != nil {
					continue
				}
				for _, kv := range bytes.Split(b, []byte{0}) {
					if v, ok := strings.CutPrefix(string(kv), "TMPDIR="); ok {
						if filepath.Dir(v) != rig.tmp || !strings.HasPrefix(filepath.Base(v), "deepcode-opencode-") || seen[v] {
							t.Fatalf("runtime %d has TMPDIR %s", pid, v)
						}
						seen[v] = true
					}
				}
			}
			if len(seen) == 0 {
				t.Fatalf("no runtime has a private TMPDIR: %v", pids)
			}
		}
		// The killed agentd's leftovers were swept by its successor; the
		// live runtimes' folders go when they close (here: with agentd).
		rig.env.MustRun("service", "stop", "--cancel-running", "--timeout", "20")
		testkit.WaitFor(t, 30*time.Second, "the runtimes' TMPDIRs to be removed", func() bool {
			left, _ := filepath.Glob(filepath.Join(rig.tmp, "deepcode-opencode-*"))
			return len(left) == 0
		})
	})
}

// checkSettled fails if agentd gave up waiting for a turn's last events
// or its prompt's answer (each wait ends on an event that should come).
func checkSettled(t *testing.T, rig *runtimeRig) {
	t.Helper()
	b, _ := os.ReadFile(rig.env.Layout("").ServiceLog())
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "the previous turn's last events did not come") || strings.Contains(l, "no answer to the prompt") {
			t.Errorf("service.log: %s", l)
		}
	}
}
