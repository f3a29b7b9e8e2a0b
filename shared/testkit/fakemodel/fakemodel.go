// Package fakemodel is a loopback model server for tests: it speaks the
// streaming OpenAI Responses API (POST /v1/responses), Anthropic Messages
// (POST /v1/messages) and OpenAI Chat Completions (POST
// /v1/chat/completions), with replies scripted by the prompt itself, so a
// real agent CLI in another process can be driven deterministically.
//
// The script is the text of the latest user message that holds one (the
// runtimes add context messages of their own). One step per line:
//
//	say <text>          stream <text> as the assistant's message
//	slow <duration>     wait that long between streamed chunks (and before
//	                    the first), e.g. "slow 200ms"; a slow reply
//	sleep <duration>    wait once, then continue
//	shell <command>     ask the runtime to run a shell command (a tool
//	                    call); the steps after it are the reply to the
//	                    request that carries the command's result
//	write <path> <text> ask the runtime to create the file <path> holding
//	                    <text> with its own file-editing tool (codex:
//	                    apply_patch; claude: Write; opencode: write), a
//	                    tool call as shell is
//	status <code> [msg] answer with that HTTP error status instead
//
// A prompt with no step gets "ok". Lines that are not steps are ignored.
// The server listens on 127.0.0.1 only.
package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a running fake model server.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no /v1).
	URL string

	srv  *http.Server
	ln   net.Listener
	mu   sync.Mutex
	reqs []Request
	n    atomic.Int64
}

// Request is a request the server received.
type Request struct {
	API    string // "responses", "messages", "chat"
	Path   string
	Auth   string // the Authorization or x-api-key header
	Model  string
	Prompt string // the script it was answered from
	// Transcript is every user message's text, in order: what the
	// runtime sent of the conversation (a resumed session sends the
	// earlier turns again).
	Transcript string
	Tools      []string
}

// Start starts a server on 127.0.0.1:0.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, URL: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("POST /responses", s.responses)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /models", s.models)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Telemetry and other side requests: answered, not scripted.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{}"))
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// Requests returns the scripted requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.mu.Unlock()
}

// step is one parsed script line.
type step struct {
	verb string
	arg  string
}

func isStep(verb string) bool {
	switch verb {
	case "say", "slow", "sleep", "shell", "write", "status":
		return true
	}
	return false
}

// parse reads the steps of a prompt (nil when it has none).
func parse(text string) []step {
	var out []step
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		verb, arg, _ := strings.Cut(line, " ")
		if isStep(verb) {
			out = append(out, step{verb, strings.TrimSpace(arg)})
		}
	}
	return out
}

// plan is what one request is answered with.
type plan struct {
	chunks []string // the text, streamed in chunks
	delay  time.Duration
	sleep  time.Duration
	shell  string // a tool call to end with
	write  *fileWrite
	status int
	msg    string
}

// fileWrite is a write step: a file the runtime is asked to create.
type fileWrite struct{ path, text string }

// call reports whether the plan ends with a tool call.
func (p plan) call() bool { return p.shell != "" || p.write != nil }

// patch is the write as an apply_patch patch (codex's format).
func (f fileWrite) patch() string {
	return "*** Begin Patch\n*** Add File: " + f.path + "\n+" + f.text + "\n*** End Patch\n"
}

// planFor picks the steps that answer a request in which toolResults
// tool calls of the current prompt have already been answered.
func planFor(steps []step, toolResults int) plan {
	var p plan
	seen := 0
	for _, st := range steps {
		if st.verb == "shell" || st.verb == "write" {
			if seen < toolResults {
				seen++
				p = plan{delay: p.delay} // what preceded it was said already
				continue
			}
			if st.verb == "write" {
				path, text, _ := strings.Cut(st.arg, " ")
				p.write = &fileWrite{path: path, text: text}
			} else {
				p.shell = st.arg
			}
			return p
		}
		if seen < toolResults {
			if st.verb == "slow" {
				p.delay, _ = time.ParseDuration(st.arg)
			}
			continue
		}
		switch st.verb {
		case "say":
			words := strings.SplitAfter(st.arg, " ")
			if len(p.chunks) > 0 {
				p.chunks = append(p.chunks, "\n")
			}
			p.chunks = append(p.chunks, words...)
		case "slow":
			p.delay, _ = time.ParseDuration(st.arg)
		case "sleep":
			d, _ := time.ParseDuration(st.arg)
			p.sleep += d
		case "status":
			code, msg, _ := strings.Cut(st.arg, " ")
			p.status, _ = strconv.Atoi(code)
			p.msg = msg
			return p
		}
	}
	if len(p.chunks) == 0 && !p.call() && p.status == 0 && toolResults == 0 {
		p.chunks = []string{"ok"}
	}
	if len(p.chunks) == 0 && !p.call() && p.status == 0 {
		p.chunks = []string{"done"}
	}
	return p
}

// wait sleeps d unless the client went away; it reports whether to go on.
func wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// sse writes server-sent events.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) event(name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	if s.f != nil {
		s.f.Flush()
	}
}

func (s *sse) raw(data string) {
	fmt.Fprintf(s.w, "data: %s\n\n", data)
	if s.f != nil {
		s.f.Flush()
	}
}

func errorStatus(w http.ResponseWriter, api string, code int, msg string) {
	if msg == "" {
		msg = http.StatusText(code)
	}
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	var body any
	switch api {
	case "messages":
		typ := map[int]string{401: "authentication_error", 403: "permission_error", 429: "rate_limit_error", 529: "overloaded_error"}[code]
		if typ == "" {
			typ = "api_error"
		}
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	default:
		typ := map[int]string{401: "invalid_request_error", 429: "rate_limit_exceeded"}[code]
		if typ == "" {
			typ = "server_error"
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"fake-model","object":"model","created":0,"owned_by":"fake"}],"models":[]}`))
}

func (s *Server) id(prefix string) string { return fmt.Sprintf("%s_%d", prefix, s.n.Add(1)) }

// usage numbers every reply reports.
const (
	inTokens  = 11
	outTokens = 7
)

// textOf flattens a message content: a string or a list of parts.
func textOf(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(content, &parts)
	var b strings.Builder
	for _, p := range parts {
		if p.Text != "" {
			b.WriteString(p.Text)
			b.WriteString("\n")
		}
	}
	return b.String()
}
