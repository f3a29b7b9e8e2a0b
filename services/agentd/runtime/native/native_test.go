package native

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func forEachDialect(t *testing.T, f func(t *testing.T, r *rig)) {
	for _, api := range dialects {
		t.Run(api, func(t *testing.T) {
			t.Parallel()
			f(t, newRig(t, api))
		})
	}
}

func TestTextTurn(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		r.mustTurn("think let me see\nsay hello from the fake model")
		msgs := r.itemsOf(KindAgentMessage)
		if len(msgs) != 1 || msgs[0].Status != ItemCompleted {
			t.Fatalf("agent messages %+v", msgs)
		}
		var p MessagePayload
		_ = json.Unmarshal(msgs[0].Payload, &p)
		if p.Text != "hello from the fake model" || r.h.response != p.Text {
			t.Fatalf("message %q, response %q", p.Text, r.h.response)
		}
		if len(r.h.deltas[msgs[0].ID]) < 2 {
			t.Fatalf("the text was not streamed: %s", r.h.deltas[msgs[0].ID])
		}
		rs := r.itemsOf(KindReasoning)
		if len(rs) != 1 || !strings.Contains(string(rs[0].Payload), "let me see") {
			t.Fatalf("reasoning items %+v", rs)
		}
		if len(r.h.usage) != 1 || r.h.usage[0].InputTokens == 0 || r.h.usage[0].OutputTokens == 0 {
			t.Fatalf("usage %+v", r.h.usage)
		}
		req := r.lastRequest()
		if !strings.Contains(req.Auth, "sk-test") || req.Model != "fake-model" || !strings.Contains(req.System, "deepcode") {
			t.Fatalf("request %+v", req)
		}
		if len(req.Tools) != len(toolOrder) {
			t.Fatalf("tools offered %v", req.Tools)
		}
		// The next turn gets the conversation from the thread's items.
		r.mustTurn("say second")
		if tr := r.lastRequest().Transcript; !strings.Contains(tr, "hello from the fake model") {
			t.Fatalf("second request lacks the first turn: %q", tr)
		}
	})
}

func TestParallelToolCalls(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		if err := os.WriteFile(filepath.Join(r.ws, "notes.txt"), []byte("alpha\nbeta\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.mustTurn("say looking\ntool read_file {\"path\":\"notes.txt\"}\ntool list {}\ntool grep {\"pattern\":\"bet\"}\nsay all done")
		tp := r.tools()
		if len(tp) != 3 || tp[0].Tool != "read_file" || tp[1].Tool != "list" || tp[2].Tool != "grep" {
			t.Fatalf("tool calls %+v", tp)
		}
		for _, p := range tp {
			if p.State != StateCompleted || p.Step != 1 || p.Approval != "none" {
				t.Fatalf("call %+v", p)
			}
		}
		req := r.lastRequest()
		if len(req.ToolResults) != 3 || !strings.Contains(req.ToolResults[0], "beta") || !strings.Contains(req.ToolResults[1], "notes.txt") ||
			!strings.Contains(req.ToolResults[2], "notes.txt:2: beta") {
			t.Fatalf("tool results sent %q", req.ToolResults)
		}
		if r.h.response != "all done" {
			t.Fatalf("response %q", r.h.response)
		}
		// Journaled before they ran: proposed (all three), then each one's end.
		j := strings.Join(r.h.journal, "\n")
		if strings.Count(j, " proposed proposed") != 3 || strings.Index(j, "proposed") > strings.Index(j, "completed completed") {
			t.Fatalf("journal:\n%s", j)
		}
		// A later turn replays the calls and their results.
		r.mustTurn("say again")
		if got := r.lastRequest().ToolResults; len(got) != 0 {
			t.Fatalf("results of the new prompt: %q", got)
		}
	})
}

// TestLocalServerShape: the Chat Completions shape of llama.cpp, ollama
// and vLLM, tool call arguments split over many chunks.
func TestLocalServerShape(t *testing.T) {
	r := newRig(t, "chat")
	r.key = ""
	if err := os.WriteFile(filepath.Join(r.ws, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.mustTurn("split\nthink hmm\ntool read_file {\"path\":\"a.txt\",\"offset\":1}\ntool glob {\"pattern\":\"*.txt\"}\nsay fine")
	tp := r.tools()
	if len(tp) != 2 || string(tp[0].Arguments) != `{"path":"a.txt","offset":1}` || tp[1].State != StateCompleted {
		t.Fatalf("calls %+v", tp)
	}
	if req := r.lastRequest(); len(req.ToolResults) != 2 || !strings.Contains(req.ToolResults[1], "a.txt") {
		t.Fatalf("results %q", req.ToolResults)
	}
	if len(r.h.usage) != 1 || r.h.usage[0].TotalTokens == 0 {
		t.Fatalf("usage %+v", r.h.usage)
	}
}

func TestModelErrors(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		for _, c := range []struct {
			prompt string
			code   errs.Code
		}{
			{"status 401 bad key", errs.ProviderAuthFailed},
			{"status 403", errs.ProviderAuthFailed},
			{"status 404 no such model", errs.ProviderUnavailable},
			{"status 400 bad request", errs.TaskFailed},
			{"flaky 500 9 0", errs.ProviderUnavailable},
		} {
			err := r.turn(context.Background(), c.prompt)
			e, ok := errs.As(err)
			if !ok || e.Code != c.code {
				t.Fatalf("%q: %v; want %s", c.prompt, err, c.code)
			}
			if strings.Contains(e.Message, "sk-test") {
				t.Fatalf("the error shows the key: %s", e.Message)
			}
		}
		// 429 and 5xx are retried, honouring Retry-After.
		start := time.Now()
		r.mustTurn("flaky 429 1 1\nsay after the rate limit")
		if d := time.Since(start); d < time.Second || r.h.response != "after the rate limit" {
			t.Fatalf("after %s: response %q", d, r.h.response)
		}
		r.mustTurn("flaky 503 2 0\nsay after the outage")
		if r.h.response != "after the outage" {
			t.Fatalf("response %q", r.h.response)
		}
	})
}

func TestRateLimitedForGood(t *testing.T) {
	r := newRig(t, "chat")
	err := r.turn(context.Background(), "flaky 429 99 0")
	if e, ok := errs.As(err); !ok || e.Code != errs.ProviderRateLimited || !e.Retryable {
		t.Fatalf("%v", err)
	}
	if n := len(r.model.Requests()); n != maxRetries+1 {
		t.Fatalf("%d requests; want %d (bounded retries)", n, maxRetries+1)
	}
}

func TestUnreachable(t *testing.T) {
	r := newRig(t, "responses")
	r.model.Close()
	err := r.turn(context.Background(), "say hi")
	if e, ok := errs.As(err); !ok || e.Code != errs.ProviderUnavailable {
		t.Fatalf("%v", err)
	}
	r.prof.Model = ""
	if e, ok := errs.As(r.turn(context.Background(), "say hi")); !ok || e.Code != errs.ProviderUnavailable || !strings.Contains(e.Message, "model") {
		t.Fatalf("no model: %v", e)
	}
}

func TestInterruptDuringStream(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		ctx, cancel := context.WithCancelCause(context.Background())
		stop := errors.New("interrupted by a client")
		done := make(chan error, 1)
		go func() { done <- r.turn(ctx, "slow 100ms\nsay one two three four five six seven eight nine ten") }()
		waitFor(t, "the first delta", func() bool {
			r.h.mu.Lock()
			defer r.h.mu.Unlock()
			return len(r.h.deltas) > 0
		})
		cancel(stop)
		if err := <-done; !errors.Is(err, stop) {
			t.Fatalf("turn ended with %v", err)
		}
		msgs := r.itemsOf(KindAgentMessage)
		if len(msgs) != 1 || msgs[0].Status != ItemFailed || !strings.Contains(string(msgs[0].Payload), "one") {
			t.Fatalf("interrupted message %+v", msgs)
		}
	})
}

func TestInterruptDuringTool(t *testing.T) {
	r := newRig(t, "chat")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	marker := filepath.Join(r.ws, "child.pid")
	go func() {
		done <- r.turn(ctx, `tool shell {"command":"echo started; sleep 30 & echo $! > child.pid; wait"}
tool read_file {"path":"x"}
say not reached`)
	}()
	waitFor(t, "the command to start", func() bool {
		_, err := os.Stat(marker)
		return err == nil && len(r.tools()) > 0 && r.tools()[0].State == StateRunning
	})
	cancel(errors.New("interrupted"))
	if err := <-done; err == nil {
		t.Fatal("the turn completed")
	}
	tp := r.tools()
	if tp[0].State != StateCancelled || !strings.Contains(tp[0].Output, "started") || tp[1].State != StateCancelled {
		t.Fatalf("calls after the interrupt: %+v", tp)
	}
	// The process group is gone, the background sleep too.
	b, _ := os.ReadFile(marker)
	pid := strings.TrimSpace(string(b))
	waitFor(t, "the sleep to be killed", func() bool {
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		// Gone, or a zombie nobody reaps (a container's init may not).
		return err != nil || strings.Contains(string(st), ") Z ")
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
