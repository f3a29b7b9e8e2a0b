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
//	flaky <code> <n> [s] answer the first n requests that reach this
//	                    point with that HTTP error status (429 and 5xx with
//	                    Retry-After: s, default 0), then go on
//	tool <name> <json>  call the tool <name> with the arguments <json> (the
//	                    deepcode runtime's own tools: shell, read_file, …);
//	                    consecutive tool steps are one answer with parallel
//	                    calls, and the steps after them are the reply to the
//	                    request that carries all their results
//	think <text>        stream <text> as a reasoning summary (Responses:
//	                    reasoning summary; Messages: a thinking block; Chat
//	                    Completions: reasoning_content) before the answer
//	split               Chat Completions only: answer in the shape local
//	                    model servers (llama.cpp, ollama, vLLM) stream: each
//	                    tool call's id and name in one chunk and its
//	                    arguments in pieces over the next ones, content
//	                    null, usage in a last chunk of its own
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
	"unicode/utf8"
)

// Server is a running fake model server.
type Server struct {
	// URL is the base URL, http://127.0.0.1:PORT (no /v1).
	URL string

	srv   *http.Server
	ln    net.Listener
	mu    sync.Mutex
	reqs  []Request
	flaky map[string]int // flaky step → errors answered so far
	n     atomic.Int64
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
	// ToolResults are the tool results the request carried after the
	// script's message, in order: what the runtime told the model its
	// tools did.
	ToolResults []string
	// AllToolResults are every tool result the request carried, earlier
	// prompts' too.
	AllToolResults []string
	// System is the request's system prompt or instructions.
	System string
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
	case "say", "slow", "sleep", "shell", "write", "status", "flaky", "tool", "think", "split":
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
	think  []string // a reasoning summary, streamed in chunks
	chunks []string // the text, streamed in chunks
	delay  time.Duration
	sleep  time.Duration
	shell  string // a tool call to end with
	write  *fileWrite
	tools  []scriptedCall // parallel calls of the deepcode runtime's tools
	split  bool
	status int
	msg    string
	// flaky: the status is answered only while fewer than flakyN errors
	// were answered for flakyKey; retryAfter is its Retry-After.
	flakyKey   string
	flakyN     int
	retryAfter string
}

// scriptedCall is a tool step: a call of a named tool with JSON arguments.
type scriptedCall struct{ name, args string }

// fileWrite is a write step: a file the runtime is asked to create.
type fileWrite struct{ path, text string }

// call reports whether the plan ends with a tool call.
func (p plan) call() bool { return p.shell != "" || p.write != nil || len(p.tools) > 0 }

// patch is the write as an apply_patch patch (codex's format).
func (f fileWrite) patch() string {
	return "*** Begin Patch\n*** Add File: " + f.path + "\n+" + f.text + "\n*** End Patch\n"
}

// planFor picks the steps that answer a request in which toolResults
// tool calls of the current prompt have already been answered.
func planFor(steps []step, toolResults int) plan {
	var p plan
	seen := 0
	for i := 0; i < len(steps); i++ {
		st := steps[i]
		if st.verb == "tool" {
			// A group of consecutive tool steps is one answer.
			var group []scriptedCall
			for ; i < len(steps) && steps[i].verb == "tool"; i++ {
				name, args, _ := strings.Cut(steps[i].arg, " ")
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				group = append(group, scriptedCall{name: name, args: strings.TrimSpace(args)})
			}
			i--
			if seen < toolResults {
				seen += len(group)
				p = plan{delay: p.delay, split: p.split}
				continue
			}
			p.tools = group
			return p
		}
		if st.verb == "shell" || st.verb == "write" {
			if seen < toolResults {
				seen++
				p = plan{delay: p.delay, split: p.split} // what preceded it was said already
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
			switch st.verb {
			case "slow":
				p.delay, _ = time.ParseDuration(st.arg)
			case "split":
				p.split = true
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
		case "think":
			p.think = append(p.think, strings.SplitAfter(st.arg, " ")...)
		case "split":
			p.split = true
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
		case "flaky":
			f := strings.Fields(st.arg)
			if len(f) < 2 {
				continue
			}
			code, _ := strconv.Atoi(f[0])
			n, _ := strconv.Atoi(f[1])
			p.status, p.flakyN, p.flakyKey = code, n, fmt.Sprintf("%d:%d", i, toolResults)
			if len(f) > 2 {
				p.retryAfter = f[2]
			} else {
				p.retryAfter = "0"
			}
			// The steps after it answer once the errors are spent.
			rest := planFor(steps[i+1:], 0)
			rest.think, rest.chunks = append(p.think, rest.think...), append(p.chunks, rest.chunks...)
			rest.status, rest.flakyN, rest.flakyKey, rest.retryAfter = p.status, p.flakyN, p.flakyKey, p.retryAfter
			rest.delay, rest.sleep = max(rest.delay, p.delay), rest.sleep+p.sleep
			rest.split = rest.split || p.split
			return rest
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

// failNow reports whether the plan answers this request with its error
// status (a flaky step counts the errors it answered).
func (s *Server) failNow(p plan, prompt string) bool {
	if p.status == 0 {
		return false
	}
	if p.flakyKey == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaky == nil {
		s.flaky = map[string]int{}
	}
	key := p.flakyKey + "\x00" + prompt
	if s.flaky[key] >= p.flakyN {
		return false
	}
	s.flaky[key]++
	return true
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

func errorStatus(w http.ResponseWriter, api string, p plan) {
	code, msg := p.status, p.msg
	if msg == "" {
		msg = http.StatusText(code)
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case p.flakyKey != "" && (code == http.StatusTooManyRequests || code >= 500):
		w.Header().Set("Retry-After", p.retryAfter)
	case code == http.StatusTooManyRequests:
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

// chunked splits s into pieces of at most n bytes (whole runes).
func chunked(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}

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
