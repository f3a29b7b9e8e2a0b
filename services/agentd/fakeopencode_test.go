package agentd_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
)

// fakeOpencodeEnv, in a runtime's environment, makes this test binary an
// `opencode serve` (see TestMain) whose behaviour the value names. It
// stands in for opencode where the real one cannot be made to do what a
// test needs; every other opencode test drives the real CLI.
const fakeOpencodeEnv = "FAKE_OPENCODE_MODE"

// fakeOpencodeIdleFirst: the server publishes a prompt's events, its
// completion and the session's idle, and only then (after
// fakeOpencodeAnswerDelay) answers the prompt's request. Real opencode
// answers first; deepcode must end such a turn on the idle, wait for the
// answer, and keep the runtime usable for the next turn.
const (
	fakeOpencodeIdleFirst   = "idle-first"
	fakeOpencodeAnswerDelay = 300 * time.Millisecond
)

// runFakeOpencode serves the few routes agentd uses on 127.0.0.1, printing
// the address as opencode does, until it is killed.
func runFakeOpencode(mode string) int {
	if mode != fakeOpencodeIdleFirst {
		fmt.Fprintf(os.Stderr, "fake opencode: unknown mode %q\n", mode)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake opencode:", err)
		return 1
	}
	f := &fakeOpencode{subscribers: map[chan []byte]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /event", f.events)
	mux.HandleFunc("POST /session", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"id": fakeOpencodeSession})
	})
	mux.HandleFunc("GET /session/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"id": r.PathValue("id")})
	})
	mux.HandleFunc("POST /session/{id}/abort", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, true) })
	mux.HandleFunc("POST /session/{id}/message", f.prompt)
	fmt.Printf("opencode server listening on http://%s\n", ln.Addr())
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, "fake opencode:", err)
		return 1
	}
	return 0
}

const fakeOpencodeSession = "ses_fake"

type fakeOpencode struct {
	mu          sync.Mutex
	subscribers map[chan []byte]bool
	prompts     int
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// publish sends an event to every subscriber of /event (one that has
// stopped reading, and whose queue is full, misses it).
func (f *fakeOpencode) publish(typ string, props map[string]any) {
	b, _ := json.Marshal(map[string]any{"type": typ, "properties": props})
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subscribers {
		select {
		case ch <- b:
		default:
		}
	}
}

func (f *fakeOpencode) events(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 256)
	f.mu.Lock()
	f.subscribers[ch] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subscribers, ch)
		f.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	fmt.Fprintf(w, "data: %s\n\n", `{"type":"server.connected","properties":{}}`)
	fl.Flush()
	for {
		select {
		case b := <-ch:
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		case <-r.Context().Done():
			return
		}
	}
}

// prompt answers POST /session/:id/message: "say X" makes the assistant
// say X.
func (f *fakeOpencode) prompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Parts) == 0 {
		http.Error(w, "bad prompt", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.prompts++
	n := f.prompts
	f.mu.Unlock()
	sid := r.PathValue("id")
	text := strings.TrimPrefix(body.Parts[0].Text, "say ")
	now := float64(time.Now().UnixMilli())
	user := map[string]any{"id": fmt.Sprintf("msg_u%d", n), "sessionID": sid, "role": "user", "time": map[string]any{"created": now}}
	reply := map[string]any{"id": fmt.Sprintf("msg_a%d", n), "sessionID": sid, "role": "assistant", "time": map[string]any{"created": now}}
	part := map[string]any{"id": fmt.Sprintf("prt_%d", n), "sessionID": sid, "messageID": reply["id"], "type": "text", "text": text,
		"time": map[string]any{"start": now, "end": now}}
	f.publish("session.status", map[string]any{"sessionID": sid, "status": map[string]any{"type": "busy"}})
	f.publish("message.updated", map[string]any{"info": user})
	f.publish("message.updated", map[string]any{"info": reply})
	f.publish("message.part.updated", map[string]any{"part": part})
	reply["time"] = map[string]any{"created": now, "completed": now}
	reply["tokens"] = map[string]any{"input": 12, "output": 3, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}}
	f.publish("message.updated", map[string]any{"info": reply})
	f.publish("session.status", map[string]any{"sessionID": sid, "status": map[string]any{"type": "idle"}})
	f.publish("session.idle", map[string]any{"sessionID": sid})
	select {
	case <-time.After(fakeOpencodeAnswerDelay):
	case <-r.Context().Done():
		return
	}
	writeJSON(w, map[string]any{"info": reply, "parts": []any{part}})
}

// TestOpenCodeIdleBeforeAnswer: a server that goes idle before it answers
// the prompt (the real one answers first). The turn ends completed with
// the events' text, once, and the runtime serves the next turns.
func TestOpenCodeIdleBeforeAnswer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("[agentd]\nruntime_idle_timeout = \"10m\"\n\n[profiles.fake-opencode]\nprovider = \"opencode\"\nbinary = %q\nmodel = \"fake/fake-model\"\napproval_policy = \"auto\"\nenv = { %s = %q }\n",
		exe, fakeOpencodeEnv, fakeOpencodeIdleFirst)
	env := startWith(t, cfg)
	c := dial(t, env)
	th := c.newThread("fake-opencode")
	for i := range 3 {
		want := fmt.Sprintf("idle first %d", i)
		t0 := time.Now()
		turn := c.start(th.ID, "say "+want)
		done := c.waitEnded(th.ID, turn.ID)
		if done.Turn.Status != agentd.StatusCompleted || done.Turn.Response != want {
			t.Fatalf("turn %d: %+v %+v", i, done.Turn, done.Turn.Error)
		}
		if msgs := messages(t, done.Items); len(msgs) != 1 || msgs[0] != want {
			t.Fatalf("turn %d: agent messages %q, want exactly %q", i, msgs, want)
		}
		checkItemsEnded(t, done.Items, agentd.ItemCompleted)
		if usage := itemsOf(done.Items, agentd.KindTokenUsage); len(usage) != 1 {
			t.Fatalf("turn %d: token usage items %+v", i, usage)
		}
		// The turn ended on the idle but did not leave the prompt's
		// request behind: it waited for the answer.
		if took := time.Since(t0); took < fakeOpencodeAnswerDelay {
			t.Fatalf("turn %d ended after %v, before the prompt's answer (%v)", i, took, fakeOpencodeAnswerDelay)
		}
	}
}
