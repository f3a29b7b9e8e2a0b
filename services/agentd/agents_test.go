package agentd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestAgentWorkspaceConflict: a logical agent holds its workspace until its
// turns have finished. Another agent's run or continue there is refused
// with WORKSPACE_CONFLICT naming the holder, and records nothing; the
// holder itself, other workspaces and plain threads are not refused; once
// the holder has finished, the workspace is free.
func TestAgentWorkspaceConflict(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	ws := t.TempDir()

	run := func(ws, prompt string) agentd.AgentReceipt {
		t.Helper()
		var r agentd.AgentReceipt
		c.must("agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": prompt, "trust": true}, &r)
		return r
	}
	wait := func(id, status string) agentd.AgentView {
		t.Helper()
		var v agentd.AgentView
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			v = agentd.AgentView{}
			c.must("agent/show", map[string]string{"id": id}, &v)
			if v.Status == status {
				return v
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("agent %s is %s, not %s", id, v.Status, status)
		return v
	}
	agents := func() int {
		t.Helper()
		var l struct{ Agents []agentd.AgentSummary }
		c.must("agent/list", map[string]any{}, &l)
		return len(l.Agents)
	}
	conflict := func(method string, params map[string]any, holder string) {
		t.Helper()
		e := c.fail(method, params, errs.WorkspaceConflict)
		if e.Retryable || e.Data["agentId"] != holder || !strings.Contains(e.Message, holder) {
			t.Fatalf("%s: %+v, want WORKSPACE_CONFLICT naming %s", method, e, holder)
		}
	}

	// An agent that finished in ws does not hold it.
	earlier := run(ws, "say earlier")
	wait(earlier.ID, "completed")
	holder := run(ws, "sleep 600s")
	wait(holder.ID, "running")
	before := agents()

	// A second agent in ws, however the folder is named, by profile or by
	// provider; and the finished agent's next turn.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{ws, ws + "/", ws + "/.", link} {
		conflict("agent/run", map[string]any{"workspace": w, "profile": "script", "prompt": "say second", "trust": true}, holder.ID)
	}
	conflict("agent/run", map[string]any{"workspace": ws, "provider": "script", "prompt": "say second"}, holder.ID)
	conflict("agent/continue", map[string]any{"id": earlier.ID, "prompt": "say again"}, holder.ID)
	// The refusals recorded nothing: no agent, no turn.
	if n := agents(); n != before {
		t.Fatalf("%d agents after the refused runs, want %d", n, before)
	}
	if n := c.readThread(earlier.ID).Thread.TurnCount; n != 1 {
		t.Fatalf("the refused continue left %d turns, want 1", n)
	}

	// Bad input is refused for what it is, not as a conflict.
	for _, tc := range []struct {
		method string
		params map[string]any
		code   errs.Code
	}{
		{"agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": " ", "trust": true}, errs.InvalidParams},
		{"agent/run", map[string]any{"workspace": ws, "profile": "nope", "prompt": "say x", "trust": true}, errs.InvalidParams},
		{"agent/run", map[string]any{"workspace": ws, "provider": "nope", "prompt": "say x"}, errs.InvalidParams},
		{"agent/run", map[string]any{"workspace": filepath.Join(ws, "missing"), "profile": "script", "prompt": "say x", "trust": true}, errs.NotFound},
		{"agent/run", map[string]any{"workspace": "rel", "profile": "script", "prompt": "say x", "trust": true}, errs.InvalidParams},
		{"agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": "say x", "trust": "yes"}, errs.InvalidParams},
		{"agent/continue", map[string]any{"id": earlier.ID, "prompt": ""}, errs.InvalidParams},
		{"agent/continue", map[string]any{"id": unknownID("thr_"), "prompt": "say x"}, errs.NotFound},
		{"agent/continue", map[string]any{"id": earlier.ID[:10], "prompt": "say x"}, errs.NotFound},
	} {
		c.fail(tc.method, tc.params, tc.code)
	}
	untrusted := t.TempDir()
	c.fail("agent/run", map[string]any{"workspace": untrusted, "profile": "script", "prompt": "say x"}, errs.WorkspaceUntrusted)

	// Not conflicts: the holder's own next turn queues behind its running
	// one; another workspace; a plain thread in ws.
	var r agentd.AgentReceipt
	c.must("agent/continue", map[string]any{"id": holder.ID, "prompt": "say next"}, &r)
	if r.Status != "queued" {
		t.Fatalf("the holder's continue: %+v, want queued", r)
	}
	elsewhere := run(t.TempDir(), "say elsewhere")
	if v := wait(elsewhere.ID, "completed"); v.Response != "elsewhere" {
		t.Fatalf("the agent in another workspace: %+v", v)
	}
	plain := c.newThreadIn(ws, "script")
	c.waitEnded(plain.ID, c.start(plain.ID, "say plain").ID)

	// The holder finishes (its queued turn first, so that it never starts):
	// the workspace is free again.
	tr := c.readThread(holder.ID)
	for i := len(tr.Turns) - 1; i >= 0; i-- {
		c.must("turn/interrupt", map[string]string{"threadId": holder.ID, "turnId": tr.Turns[i].ID}, nil)
	}
	wait(holder.ID, "error")
	c.must("agent/continue", map[string]any{"id": earlier.ID, "prompt": "say again"}, &r)
	if v := wait(earlier.ID, "completed"); v.Response != "again" {
		t.Fatalf("the continue after the holder finished: %+v", v)
	}
	after := run(ws, "say after")
	if v := wait(after.ID, "completed"); v.Response != "after" {
		t.Fatalf("the run after the holder finished: %+v", v)
	}
}

// TestAgentWorkspaceConflictRace: of agents started at once in one
// workspace exactly one runs; the others are refused and leave no agent
// behind.
func TestAgentWorkspaceConflictRace(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	ws := t.TempDir()
	c.newThreadIn(ws, "script") // trusts ws

	const n = 8
	ids := make([]string, n)
	results := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var r agentd.AgentReceipt
			results[i] = c.peer.Call(ctx, "agent/run", map[string]any{"workspace": ws, "profile": "script", "prompt": "sleep 600s"}, &r)
			ids[i] = r.ID
		})
	}
	wg.Wait()
	winner := ""
	for i, err := range results {
		switch {
		case err == nil && winner == "":
			winner = ids[i]
		case err == nil:
			t.Fatalf("two agents started in one workspace: %s and %s", winner, ids[i])
		case !errs.Is(err, errs.WorkspaceConflict):
			t.Fatalf("agent/run %d: %v, want WORKSPACE_CONFLICT", i, err)
		}
	}
	if winner == "" {
		t.Fatal("no agent started")
	}
	var l struct{ Agents []agentd.AgentSummary }
	c.must("agent/list", map[string]any{}, &l)
	if len(l.Agents) != 1 || l.Agents[0].ID != winner {
		t.Fatalf("agent/list after the race: %+v, want only %s", l.Agents, winner)
	}
	tr := c.readThread(winner)
	c.must("turn/interrupt", map[string]string{"threadId": winner, "turnId": tr.Turns[0].ID}, nil)
}
