package agentd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd"
)

func TestScriptTurnCompletes(t *testing.T) {
	env := startInstance(t)
	for name, c := range map[string]*conn{"agentd.sock": dial(t, env), "gateway.sock": dialGateway(t, env)} {
		t.Run(name, func(t *testing.T) { runScriptTurn(t, c) })
	}
}

func runScriptTurn(t *testing.T, c *conn) {
	ws := t.TempDir()
	var started struct{ Thread agentd.Thread }
	c.must("thread/start", map[string]any{"workspace": ws, "profile": "script", "trust": true}, &started)
	var res agentd.TurnSubmitResult
	c.must("turn/start", map[string]any{"threadId": started.Thread.ID, "messageId": "m1", "input": map[string]string{"text": "say hello world\nwrite out.txt done"}}, &res)
	ev := c.waitEvent(started.Thread.ID, "turn.completed")
	var done struct{ Turn agentd.Turn }
	if err := json.Unmarshal(ev.Payload, &done); err != nil || done.Turn.Status != "completed" || done.Turn.Response != "hello world" {
		t.Fatalf("turn.completed %s", ev.Payload)
	}
	var types []string
	for i, e := range c.threadEvents(started.Thread.ID) {
		if e.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d", i, e.Sequence)
		}
		types = append(types, e.Type)
	}
	want := "turn.queued item.completed turn.started item.started item.delta item.completed item.started item.completed turn.completed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("events:\n%s\nwant\n%s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "done" {
		t.Fatalf("out.txt: %q %v", b, err)
	}
}
