package agentd_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// commandOf is a turn's one command item and its payload.
func commandOf(t *testing.T, items []agentd.Item) (agentd.Item, runtime.CommandPayload) {
	t.Helper()
	cmds := itemsOf(items, agentd.KindCommandExecution)
	if len(cmds) != 1 {
		t.Fatalf("%d command items: %+v", len(cmds), items)
	}
	var p runtime.CommandPayload
	decode(t, cmds[0].Payload, &p)
	return cmds[0], p
}

// outputOf concatenates the output deltas of an item per stream. A
// character split between two deltas would show as U+FFFD: JSON carries
// only valid UTF-8.
func outputOf(t *testing.T, events []agentd.Event, itemID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ev := range events {
		if ev.Type != agentd.EventItemDelta {
			continue
		}
		var d struct {
			ItemID string              `json:"itemId"`
			Delta  runtime.OutputDelta `json:"delta"`
		}
		decode(t, ev.Payload, &d)
		if d.ItemID != itemID {
			continue
		}
		out[d.Delta.Stream] += d.Delta.Text
	}
	return out
}

// TestExecProvider covers the exec provider: the default "shell" profile
// doing real work, exit statuses, both output streams, UTF-8 safety, the
// prompt on stdin, a missing runtime and the profile timeout.
func TestExecProvider(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)

	t.Run("exit status and streams", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		ws := t.TempDir()
		th := c.newThreadIn(ws, "shell")
		turn := c.start(th.ID, "echo hi; echo oops >&2; exit 3")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error == nil || done.Turn.Error.Code != errs.TaskFailed || done.Turn.Error.Retryable {
			t.Fatalf("exit 3: %+v %+v", done.Turn, done.Turn.Error)
		}
		if !strings.Contains(done.Turn.Error.Message, "exit status 3") {
			t.Errorf("error message %q does not give the exit status", done.Turn.Error.Message)
		}
		if code, _ := done.Turn.Error.Data["exitCode"].(float64); code != 3 {
			t.Errorf("turn error data %v does not carry exitCode 3", done.Turn.Error.Data)
		}
		item, p := commandOf(t, done.Items)
		if item.Status != agentd.ItemFailed || p.ExitCode == nil || *p.ExitCode != 3 || p.Cwd != th.Workspace ||
			strings.Join(p.Command, " ") != "/bin/sh -c echo hi; echo oops >&2; exit 3" ||
			!strings.Contains(p.Output, "hi\n") || !strings.Contains(p.Output, "oops\n") || p.OutputBytes != 8 {
			t.Fatalf("command item: %s", item.Payload)
		}
		out := outputOf(t, c.replayAll(th.ID), item.ID)
		if out["stdout"] != "hi\n" || out["stderr"] != "oops\n" {
			t.Fatalf("deltas: %q", out)
		}

		// A command that succeeds does real work in the workspace.
		turn = c.start(th.ID, "pwd; printf 'made' > made.txt; cat made.txt")
		done = c.waitEnded(th.ID, turn.ID)
		item, p = commandOf(t, done.Items)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Error != nil || item.Status != agentd.ItemCompleted ||
			p.ExitCode == nil || *p.ExitCode != 0 || done.Turn.Response != th.Workspace+"\nmade" {
			t.Fatalf("exit 0: %+v %s", done.Turn, item.Payload)
		}
	})

	t.Run("utf-8", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("shell")
		// "€" written in two parts with a pause between, an invalid byte,
		// and a large output read at arbitrary boundaries.
		turn := c.start(th.ID, `printf '\342\202'; sleep 0.3; printf '\254\n'; printf 'a\377b\n' >&2; yes 'é€ü' | head -n 30000`)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted {
			t.Fatalf("turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		item, p := commandOf(t, done.Items)
		out := outputOf(t, c.replayAll(th.ID), item.ID)
		want := "€\n" + strings.Repeat("é€ü\n", 30000)
		if out["stdout"] != want {
			t.Fatalf("stdout: %d bytes, want %d; starts %q", len(out["stdout"]), len(want), out["stdout"][:min(40, len(out["stdout"]))])
		}
		if out["stderr"] != "a\uFFFDb\n" {
			t.Fatalf("stderr: %q", out["stderr"])
		}
		// The item keeps a bounded tail that starts on a character.
		if !utf8.ValidString(p.Output) || len(p.Output) > 64<<10 || !strings.HasSuffix(p.Output, "é€ü\n") || p.OutputBytes != int64(len(want)+len("a\uFFFDb\n")) {
			t.Fatalf("item output: %d bytes, outputBytes %d", len(p.Output), p.OutputBytes)
		}
	})

	t.Run("prompt on stdin", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("cat")
		prompt := "first line\nsecond line with ünïcode"
		turn := c.start(th.ID, prompt)
		done := c.waitEnded(th.ID, turn.ID)
		_, p := commandOf(t, done.Items)
		if done.Turn.Status != agentd.StatusCompleted || p.Output != prompt || strings.Join(p.Command, " ") != "/bin/cat" || done.Turn.Response != prompt {
			t.Fatalf("cat: %+v %+v", done.Turn, p)
		}
	})

	t.Run("missing runtime", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("missing")
		turn := c.start(th.ID, "anything")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error.Code != errs.ProviderUnavailable || !done.Turn.Error.Retryable {
			t.Fatalf("missing runtime: %+v %+v", done.Turn, done.Turn.Error)
		}
		// The internal cause stays in the log.
		if strings.Contains(done.Turn.Error.Message, "no such file") {
			t.Errorf("the error shows an internal cause: %q", done.Turn.Error.Message)
		}
	})

	t.Run("profile timeout", func(t *testing.T) {
		t.Parallel()
		c := dial(t, env)
		th := c.newThread("short")
		turn := c.start(th.ID, "echo started; sleep 29.5; echo after")
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusFailed || done.Turn.Error.Code != errs.DaemonTimeout || !done.Turn.Error.Retryable {
			t.Fatalf("timed out turn: %+v %+v", done.Turn, done.Turn.Error)
		}
		_, p := commandOf(t, done.Items)
		if p.Output != "started\n" {
			t.Fatalf("output %q", p.Output)
		}
		if left := processesRunning(env, "sleep", "29.5"); len(left) != 0 {
			t.Fatalf("processes left after the timeout: %v", left)
		}
	})

	t.Run("a turn per thread", func(t *testing.T) {
		t.Parallel()
		// The profile of a turn may differ from its thread's.
		c := dial(t, env)
		th := c.newThread("shell")
		var r agentd.TurnSubmitResult
		c.must("turn/start", map[string]any{"threadId": th.ID, "messageId": "k-prof", "profile": "script", "input": map[string]string{"text": "say from script"}}, &r)
		done := c.waitEnded(th.ID, r.Turn.ID)
		if done.Turn.Profile != "script" || done.Turn.Response != "from script" {
			t.Fatalf("turn with another profile: %+v", done.Turn)
		}
		raw, _ := json.Marshal(done.Turn)
		if strings.Contains(string(raw), "providerSession") {
			t.Fatalf("turn shows the provider session: %s", raw)
		}
	})
}
