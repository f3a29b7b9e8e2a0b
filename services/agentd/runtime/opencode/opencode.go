// Package opencode is the "opencode" provider: turns run through an
// opencode server (opencode serve) over HTTP and its event stream, one
// warm server per thread.
package opencode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Provider runs turns through `opencode serve`: an HTTP server on
// 127.0.0.1 (port chosen by opencode, printed on stdout), one per thread,
// kept warm by the runtime pool. A turn is POST /session/:id/message,
// followed on the server's event stream (GET /event, server-sent events);
// it ends on that request's answer (the final assistant message), or on
// the session's return to idle if that comes first (see
// opencodeTurn.run). opencode answers before it publishes the prompt's
// last events: the next turn waits for them (opencodeRuntime.settle). The
// opencode session id is the durable provider session id; a new server
// (after an idle close or an agentd restart) continues it, since opencode
// keeps its sessions on disk.
//
// The server is private to deepcode: it requires a random password (HTTP
// basic auth, OPENCODE_SERVER_PASSWORD) that only agentd knows, so other
// local users cannot drive the runtime through its TCP port. It gets a
// private TMPDIR (opencode unpacks a native library there at every start
// and never removes it), removed when the runtime closes.
//
// Approvals: opencode has a request/response permission channel. deepcode
// configures the permissions "bash", "edit", "webfetch" and
// "external_directory" to "ask", so opencode publishes a permission request
// (event permission.asked) before each such tool call; each becomes a
// deepcode approval decided by the profile's approval_policy ("ask" waits
// for a client, "auto" approves, "never" denies) and the answer goes back
// with POST /permission/:id/reply ("once" or "reject").
type Provider struct{}

func (Provider) CanSteer() bool { return false }

// opencodeStartTimeout bounds a runtime's start: the server's address, its
// event stream and the session.
var opencodeStartTimeout = 2 * time.Minute

// opencodeListening is the line opencode serve prints once it accepts
// requests (requests sent earlier can hang).
var opencodeListening = regexp.MustCompile(`https?://[0-9A-Za-z.\[\]:-]+`)

// ocEvent is one event of opencode's event stream, decoded once by the
// stream's reader.
type ocEvent struct {
	Type string
	P    *ocProps
	// seq numbers the events the reader passed on, in stream order.
	seq uint64
}

// ocProps holds the properties of the events a turn uses (each event type
// sets its own).
type ocProps struct {
	SessionID string `json:"sessionID"`
	// message.updated
	Info *ocMessageInfo `json:"info"`
	// message.part.updated
	Part *ocPartInfo `json:"part"`
	// message.part.updated (older servers), message.part.delta
	Delta string `json:"delta"`
	// message.part.delta
	MessageID string `json:"messageID"`
	PartID    string `json:"partID"`
	Field     string `json:"field"`
	// session.status
	Status struct {
		Type string `json:"type"`
	} `json:"status"`
	// session.error
	Error *ocError `json:"error"`
	// permission.asked, permission.updated
	ID         string          `json:"id"`
	Permission string          `json:"permission"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Patterns   []string        `json:"patterns"`
	Metadata   json.RawMessage `json:"metadata"`
}

// ocWire is an event as the stream sends it.
type ocWire struct {
	Type       string   `json:"type"`
	Properties *ocProps `json:"properties"`
	// /global/event wraps the event in a payload.
	Payload *ocWire `json:"payload"`
}

// ocTurnEvent reports whether a turn (or the runtime's settling) uses the
// events of type typ.
func ocTurnEvent(typ string) bool {
	switch typ {
	case "message.updated", "message.part.updated", "message.part.delta", "session.error",
		"session.status", "session.idle", "permission.asked", "permission.updated":
		return true
	}
	return false
}

// ocSkip reports whether an event's data is, by its "type" (opencode
// writes it before the properties), one no turn uses: most of the stream
// (session.updated, session.diff, plugin, file and LSP events, heartbeats)
// is not worth decoding.
func ocSkip(data []byte) bool {
	const key = `"type":"`
	i := bytes.Index(data, []byte(key))
	// The event's own type: no object or array opens before it.
	if i < 0 || data[0] != '{' || bytes.ContainsAny(data[1:i], "{[") {
		return false
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || bytes.IndexByte(rest[:j], '\\') >= 0 {
		return false
	}
	return !ocTurnEvent(string(rest[:j]))
}

type opencodeRuntime struct {
	*runtime.Proc
	base     string // http://127.0.0.1:PORT
	password string
	client   *http.Client
	session  string
	// dir is the workspace: opencode scopes its projects and sessions by
	// directory.
	dir string

	// replies are the refusals of permission requests no turn was there
	// to answer (Close waits for them).
	replies sync.WaitGroup

	mu      sync.Mutex
	handler func(ocEvent)
	// What the reader saw of the session (guarded by mu): seq counts the
	// events it passed on; lastIdle is the seq of the last idle event
	// (session.status idle or session.idle), doneSeq that of the last
	// update of a completed assistant message, doneID.
	seq, lastIdle, doneSeq uint64
	doneID                 string
	// settled, when not nil, is closed once the previous turn's trailing
	// events have arrived (see settle); settleMsg and settleAfter say
	// which: the session went idle after the completion of the message
	// settleMsg (if set), else after the event settleAfter.
	settled     chan struct{}
	settleMsg   string
	settleAfter uint64
	// events is closed when the event stream ends.
	events chan struct{}
	cancel context.CancelFunc
	// dead is closed when the process exits or its event stream ends
	// (either makes the runtime unusable).
	dead chan struct{}
}

// Done is closed once the runtime is unusable: its process exited or its
// event stream ended.
func (rt *opencodeRuntime) Done() <-chan struct{} { return rt.dead }

// opencodeConfig is the configuration deepcode gives opencode (as
// OPENCODE_CONFIG_CONTENT, merged over the user's own): the permissions
// that make opencode ask, and, for a profile with base_url, a "deepcode"
// provider on the OpenAI-compatible Chat Completions API there, whose key
// is OPENCODE_API_KEY.
func opencodeConfig(t *runtime.TurnRun) ([]byte, string, string) {
	cfg := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		"permission": map[string]any{
			"bash":               "ask",
			"edit":               "ask",
			"webfetch":           "ask",
			"external_directory": "ask",
		},
		// A denied tool call is the model's to handle, as with codex and
		// claude: the turn goes on without it.
		"experimental": map[string]any{"continue_loop_on_deny": true},
	}
	providerID, modelID := "", runtime.FirstNonEmpty(t.Model, t.Profile.Model)
	if t.Profile.BaseURL != "" {
		providerID = "deepcode"
		models := map[string]any{}
		if modelID != "" {
			models[modelID] = map[string]any{"name": modelID}
		}
		cfg["provider"] = map[string]any{"deepcode": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "deepcode",
			"options": map[string]any{"baseURL": t.Profile.BaseURL, "apiKey": "{env:OPENCODE_API_KEY}"},
			"models":  models,
		}}
		cfg["enabled_providers"] = []string{"deepcode"}
	} else if p, m, ok := strings.Cut(modelID, "/"); ok {
		providerID, modelID = p, m
	}
	if providerID != "" && modelID != "" {
		cfg["model"] = providerID + "/" + modelID
		cfg["small_model"] = providerID + "/" + modelID
	}
	b, _ := json.Marshal(cfg)
	return b, providerID, modelID
}

func opencodeArgs(bin string, t *runtime.TurnRun) []string {
	return append([]string{bin, "serve", "--hostname", "127.0.0.1", "--port", "0"}, t.Profile.Args...)
}

func (Provider) key(t *runtime.TurnRun, bin string) string {
	p := t.Profile
	return strings.Join(append([]string{"opencode", t.ProfileName, bin, p.BaseURL, p.CredentialsFile, t.Workspace, runtime.FirstNonEmpty(t.Model, p.Model), fmt.Sprint(p.Env)}, p.Args...), "\x00")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// opencodeSweep removes, once per agentd, the temporary folders of
// runtimes of an agentd that was killed (its cleanup never ran).
var opencodeSweep sync.Once

// sweepOpencodeTemp removes the folders deepcode-opencode-<pid>-* whose
// agentd is gone.
func sweepOpencodeTemp() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "deepcode-opencode-*"))
	for _, d := range dirs {
		rest := strings.TrimPrefix(filepath.Base(d), "deepcode-opencode-")
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || runtime.ProcessAlive(pid) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

func (op Provider) start(ctx context.Context, t *runtime.TurnRun, bin string) (runtime.Instance, error) {
	cfg, _, _ := opencodeConfig(t)
	opencodeSweep.Do(sweepOpencodeTemp)
	tmp, err := os.MkdirTemp("", fmt.Sprintf("deepcode-opencode-%d-", os.Getpid()))
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot create the opencode runtime's temporary folder")
	}
	password := randomHex(24)
	extra := map[string]string{
		"TMPDIR":                           tmp,
		"OPENCODE_CONFIG_CONTENT":          string(cfg),
		"OPENCODE_SERVER_PASSWORD":         password,
		"OPENCODE_SERVER_USERNAME":         "opencode",
		"OPENCODE_DISABLE_AUTOUPDATE":      "true",
		"OPENCODE_DISABLE_SHARE":           "true",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
		"OPENCODE_DISABLE_LSP_DOWNLOAD":    "true",
		"OPENCODE_CLIENT":                  "deepcode",
	}
	if t.Profile.BaseURL != "" {
		// Its model list is the configuration's; models.dev is elsewhere.
		extra["OPENCODE_DISABLE_MODELS_FETCH"] = "true"
	}
	env, secrets, err := runtime.Env("opencode", t.Profile, extra)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, err
	}
	secrets = append(secrets, password)
	proc, err := runtime.StartProc(runtime.ProcSpec{Name: "opencode", Argv: opencodeArgs(bin, t), Dir: t.Workspace, Env: env, Secrets: secrets,
		Cleanup: []func(){func() { _ = os.RemoveAll(tmp) }}})
	if err != nil {
		return nil, err
	}
	var rt *opencodeRuntime
	ok := false
	defer func() {
		switch {
		case ok:
		case rt != nil:
			rt.Close()
		default:
			proc.Close()
		}
	}()
	// OpenCode starts slowly (seconds; much more on a loaded machine).
	sctx, cancel := context.WithTimeout(ctx, opencodeStartTimeout)
	defer cancel()
	base, err := opencodeAddress(sctx, proc)
	if err != nil {
		return nil, runtime.StartErr(proc, err)
	}
	rt = &opencodeRuntime{Proc: proc, base: base, password: password, dir: t.Workspace,
		client: &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 4}}}
	if err := rt.follow(sctx); err != nil {
		return nil, runtime.StartErr(proc, err)
	}
	rt.dead = make(chan struct{})
	go func() {
		select {
		case <-proc.Done():
		case <-rt.events:
		}
		close(rt.dead)
	}()
	if t.SessionID != "" {
		var s struct {
			ID string `json:"id"`
		}
		if err := rt.do(sctx, http.MethodGet, "/session/"+url.PathEscape(t.SessionID), nil, &s); err != nil || s.ID == "" {
			if _, isHTTP := err.(*opencodeHTTPError); isHTTP || (err == nil && s.ID == "") {
				e := errs.Wrap(err, errs.ProviderUnavailable, "opencode cannot resume its session %s of this thread", t.SessionID)
				e.Retryable = false
				return nil, e
			}
			return nil, runtime.StartErr(proc, err)
		}
		rt.setSession(s.ID)
	} else {
		var s struct {
			ID string `json:"id"`
		}
		if err := rt.do(sctx, http.MethodPost, "/session", map[string]any{}, &s); err != nil {
			return nil, runtime.StartErr(proc, err)
		}
		if s.ID == "" {
			return nil, errs.New(errs.ProviderUnavailable, "opencode created a session without an id")
		}
		rt.setSession(s.ID)
	}
	ok = true
	return rt, nil
}

// setSession sets the session (the event reader, already running, reads
// it).
func (rt *opencodeRuntime) setSession(id string) {
	rt.mu.Lock()
	rt.session = id
	rt.mu.Unlock()
}

// opencodeAddress reads opencode serve's stdout up to the line with its
// address, then keeps draining it (to the process's exit).
func opencodeAddress(ctx context.Context, p *runtime.Proc) (string, error) {
	found := make(chan string, 1)
	go func() {
		br := bufio.NewReader(p.Stdout())
		sent := false
		for {
			line, err := br.ReadString('\n')
			if !sent {
				if u := opencodeListening.FindString(line); u != "" && strings.Contains(line, "listening") {
					found <- strings.TrimRight(u, "/")
					sent = true
				} else if line != "" {
					p.Stderr().Add(line)
				}
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case u := <-found:
		return u, nil
	case <-p.Done():
		return "", runtime.Crash(p, nil)
	case <-ctx.Done():
		return "", errs.Wrap(context.Cause(ctx), errs.ProviderUnavailable, "opencode did not print its address")
	}
}

type opencodeHTTPError struct {
	method, path string
	status       int
	body         string
}

func (e *opencodeHTTPError) Error() string {
	return fmt.Sprintf("opencode %s %s: %d %s", e.method, e.path, e.status, e.body)
}

// do sends a request to the server; result (if not nil) receives its JSON
// answer.
func (rt *opencodeRuntime) do(ctx context.Context, method, path string, body, result any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, rt.base+path, rd)
	if err != nil {
		return err
	}
	rt.auth(req)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := rt.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return runtime.Crash(rt.Proc, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		return &opencodeHTTPError{method: method, path: path, status: resp.StatusCode, body: runtime.Redact(runtime.LastRunes(strings.TrimSpace(string(b)), 400), rt.Secrets())}
	}
	if result != nil && len(bytes.TrimSpace(b)) > 0 {
		return json.Unmarshal(b, result)
	}
	return nil
}

func (rt *opencodeRuntime) auth(req *http.Request) {
	req.SetBasicAuth("opencode", rt.password)
	req.Header.Set("x-opencode-directory", rt.dir)
}

// follow opens the event stream and waits for its first event
// (server.connected), so that no event of a later turn is missed.
func (rt *opencodeRuntime) follow(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, rt.base+"/event", nil)
	if err != nil {
		cancel()
		return err
	}
	rt.auth(req)
	req.Header.Set("Accept", "text/event-stream")
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := rt.client.Do(req)
		got <- result{resp, err}
	}()
	var resp *http.Response
	select {
	case r := <-got:
		if r.err != nil {
			cancel()
			return runtime.Crash(rt.Proc, r.err)
		}
		resp = r.resp
	case <-ctx.Done():
		cancel()
		return context.Cause(ctx)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		return &opencodeHTTPError{method: "GET", path: "/event", status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	rt.cancel = cancel
	rt.events = make(chan struct{})
	connected := make(chan struct{})
	go rt.readEvents(resp.Body, connected)
	select {
	case <-connected:
		return nil
	case <-rt.events:
		return runtime.Crash(rt.Proc, nil)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (rt *opencodeRuntime) readEvents(body io.ReadCloser, connected chan struct{}) {
	defer close(rt.events)
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10)
	var data bytes.Buffer
	first := true
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0 && err == nil:
			if data.Len() > 0 {
				if first {
					first = false
					close(connected)
				}
				rt.dispatch(data.Bytes())
				data.Reset()
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" ")))
		}
		if err != nil {
			return
		}
	}
}

// dispatch decodes one event (if a turn uses its type), notes the
// session's idle, and passes the event to the running turn.
func (rt *opencodeRuntime) dispatch(data []byte) {
	if ocSkip(data) {
		return
	}
	var w ocWire
	if err := json.Unmarshal(data, &w); err != nil {
		// A property of an unexpected type leaves the others decoded.
		if _, typeErr := err.(*json.UnmarshalTypeError); !typeErr {
			return
		}
	}
	if w.Type == "" && w.Payload != nil {
		w = *w.Payload
	}
	if !ocTurnEvent(w.Type) {
		return
	}
	if w.Properties == nil {
		w.Properties = &ocProps{}
	}
	ev := ocEvent{Type: w.Type, P: w.Properties}
	p := ev.P
	idle := ev.Type == "session.idle" || (ev.Type == "session.status" && p.Status.Type == "idle")
	done := ev.Type == "message.updated" && p.Info != nil && p.Info.Role == "assistant" && p.Info.Time.Completed != nil
	rt.mu.Lock()
	rt.seq++
	ev.seq = rt.seq
	if (idle || done) && p.sessionID() == rt.session && rt.session != "" {
		if idle {
			rt.lastIdle = ev.seq
		} else {
			rt.doneID, rt.doneSeq = p.Info.ID, ev.seq
		}
		if rt.settled != nil && rt.settledLocked() {
			close(rt.settled)
			rt.settled = nil
		}
	}
	h := rt.handler
	rt.mu.Unlock()
	if h != nil {
		h(ev)
	} else if ev.Type == "permission.asked" || ev.Type == "permission.updated" {
		// A request with no turn to answer it: refuse.
		rt.replies.Go(func() { _ = rt.replyPermission(ev.P.ID, "reject", "no deepcode turn is running") })
	}
}

// sessionID is the session the event is about: its own property, or its
// message's or part's.
func (p *ocProps) sessionID() string {
	switch {
	case p.SessionID != "":
		return p.SessionID
	case p.Info != nil && p.Info.SessionID != "":
		return p.Info.SessionID
	case p.Part != nil:
		return p.Part.SessionID
	}
	return ""
}

// messageID is the message a part's event is about.
func (p *ocProps) messageID() string {
	if p.MessageID == "" && p.Part != nil {
		return p.Part.MessageID
	}
	return p.MessageID
}

// settledLocked reports whether the previous turn's trailing events have
// arrived (rt.mu held).
func (rt *opencodeRuntime) settledLocked() bool {
	if rt.settleMsg != "" {
		return rt.doneID == rt.settleMsg && rt.lastIdle > rt.doneSeq
	}
	return rt.lastIdle > rt.settleAfter
}

// opencodeSettleTimeout bounds how long a turn waits for the previous
// turn's trailing events (see settle).
var opencodeSettleTimeout = 30 * time.Second

// settle waits until the previous turn's trailing events have arrived,
// so that none reaches this turn (an idle among them would end it): a
// turn may end on its prompt's answer, which opencode sends before it
// publishes the end of the prompt, or on the session's first idle, which
// after an error or an abort precedes the final message's completion and
// a second idle. What is awaited is the session's idle after the final
// message's completion (or, without an answer, after the turn's start);
// events meanwhile go to no turn (permission requests are refused). Given
// up after opencodeSettleTimeout, or at once if the runtime is dead (the
// turn then finds it so).
func (rt *opencodeRuntime) settle(ctx context.Context, log *slog.Logger) error {
	rt.mu.Lock()
	ch := rt.settled
	rt.mu.Unlock()
	if ch == nil {
		return nil
	}
	timer := time.NewTimer(opencodeSettleTimeout)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-rt.dead:
	case <-timer.C:
		if log != nil {
			log.Warn("opencode: the previous turn's last events did not come; the turn goes on", "session", rt.session, "waited", opencodeSettleTimeout)
		}
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	rt.mu.Lock()
	if rt.settled == ch {
		rt.settled = nil
	}
	rt.mu.Unlock()
	return nil
}

func (rt *opencodeRuntime) replyPermission(id, reply, message string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := map[string]any{"reply": reply}
	if message != "" && reply == "reject" {
		body["message"] = message
	}
	return rt.do(ctx, http.MethodPost, "/permission/"+url.PathEscape(id)+"/reply", body, nil)
}

// Close stops the event stream, then the process (and removes its TMPDIR).
func (rt *opencodeRuntime) Close() {
	if rt.cancel != nil {
		rt.cancel()
	}
	rt.Proc.Close()
	rt.replies.Wait() // the server is gone: they fail at once
	rt.client.CloseIdleConnections()
}

func (op Provider) Run(ctx context.Context, t *runtime.TurnRun) error {
	bin, err := runtime.ResolveBinary(t)
	if err != nil {
		return err
	}
	r, release, _, err := t.Pool.Acquire(ctx, t.ThreadID, op.key(t, bin), func(ctx context.Context) (runtime.Instance, error) { return op.start(ctx, t, bin) })
	if err != nil {
		return err
	}
	rt := r.(*opencodeRuntime)
	keep := false
	defer func() { release(keep) }()
	if err := rt.settle(ctx, t.Pool.Log()); err != nil {
		keep = true
		return err
	}
	if rt.session != t.SessionID {
		t.Sink.SetSession(rt.session)
	}
	ot := &opencodeTurn{t: t, rt: rt, roles: map[string]string{}, parts: map[string]*ocPart{}, counted: map[string]bool{}, events: runtime.NewInbox[ocEvent]()}
	rt.mu.Lock()
	rt.handler = ot.events.Put
	rt.mu.Unlock()
	defer func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.handler = nil
		if !keep {
			return
		}
		// What of this turn is still to come (the next turn waits for
		// it): up to the idle after the final message's completion, else
		// (no answer) after the turn's start.
		switch {
		case ot.final != "":
			rt.settleMsg, rt.settleAfter = ot.final, 0
		case ot.started:
			rt.settleMsg, rt.settleAfter = "", ot.startSeq
		default:
			return
		}
		if !rt.settledLocked() {
			rt.settled = make(chan struct{})
		}
	}()
	keep, err = ot.run(ctx)
	return err
}

// ocPart is an opencode message part mapped to a deepcode item.
type ocPart struct {
	id    string // deepcode item id; "" once completed
	kind  string
	text  string // what was reported of a text part
	cmd   runtime.CommandPayload
	fc    runtime.FileChangesPayload
	shown bool // a tool part whose item was started
}

type opencodeTurn struct {
	t      *runtime.TurnRun
	rt     *opencodeRuntime
	roles  map[string]string  // message id → role
	parts  map[string]*ocPart // by part id
	held   []ocEvent          // parts of messages whose role is not known yet
	events *runtime.Inbox[ocEvent]
	usage  runtime.UsagePayload
	// counted: assistant messages whose tokens are in usage.
	counted map[string]bool
	started bool // the session went busy
	// startSeq is the event that showed the start.
	startSeq uint64
	// final is the id of the prompt's final assistant message, from the
	// prompt's answer.
	final   string
	failure error
	wg      sync.WaitGroup
}

// ocMessage is a message with its parts: the answer to a prompt.
type ocMessage struct {
	Info  ocMessageInfo `json:"info"`
	Parts []ocPartInfo  `json:"parts"`
}

// ocAnswer is the outcome of the prompt's request.
type ocAnswer struct {
	msg ocMessage
	err error
}

// opencodeAnswerWait bounds how long a turn that ended on the session's
// idle waits for its prompt's answer (which follows at once).
var opencodeAnswerWait = 30 * time.Second

// run sends the prompt (POST /session/:id/message, which answers with the
// final assistant message once the prompt is done) and maps the session's
// events to the turn's items until the end: the answer, once the events
// have shown its message (the events of earlier steps came before it, and
// the answer brings the final message's last state), or the session's
// idle, whichever comes first. opencode answers before it publishes the
// prompt's last events, held while it is busy.
func (ot *opencodeTurn) run(ctx context.Context) (keep bool, err error) {
	t := ot.t
	defer ot.wg.Wait()
	body := map[string]any{"parts": []any{map[string]any{"type": "text", "text": t.Prompt}}}
	_, providerID, modelID := opencodeConfig(t)
	if providerID != "" && modelID != "" {
		body["model"] = map[string]string{"providerID": providerID, "modelID": modelID}
	}
	// The request lasts as long as the prompt: an interrupt aborts the
	// prompt (POST /session/:id/abort), which answers it. It is cancelled
	// only when the runtime is given up; run waits for its end.
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan ocAnswer, 1)
	go func() {
		var a ocAnswer
		var raw json.RawMessage
		if a.err = ot.rt.do(pctx, http.MethodPost, "/session/"+url.PathEscape(ot.rt.session)+"/message", body, &raw); a.err == nil {
			// As with the events, a property of an unexpected type
			// leaves the others decoded.
			_ = json.Unmarshal(raw, &a.msg)
		}
		answers <- a
	}()
	pending := answers // nil once answered
	var answer *ocAnswer
	defer func() {
		if pending == nil {
			return
		}
		if keep {
			timer := time.NewTimer(opencodeAnswerWait)
			defer timer.Stop()
			select {
			case a := <-pending:
				ot.answered(&a)
				return
			case <-ot.rt.dead:
			case <-timer.C:
				if log := ot.t.Pool.Log(); log != nil {
					log.Warn("opencode: no answer to the prompt after the session went idle", "session", ot.rt.session, "waited", opencodeAnswerWait)
				}
			}
		}
		cancel()
		<-pending
	}()
	var grace <-chan time.Time
	interrupted := false
	done := ctx.Done()
	// end ends the turn with the runtime still usable; gone, with the
	// runtime lost (its items left open fail).
	end := func() (bool, error) {
		ot.closeItems()
		ot.finishUsage()
		if interrupted || ctx.Err() != nil {
			return true, context.Cause(ctx)
		}
		return true, ot.failure
	}
	gone := func(err error) (bool, error) {
		ot.closeItems()
		if interrupted {
			return false, context.Cause(ctx)
		}
		return false, err
	}
	for {
		select {
		case <-ot.events.Ready():
			if ot.drain(ctx) {
				return end()
			}
			if answer != nil && ot.reconcile(ctx, answer) {
				return end()
			}
		case a := <-pending:
			pending = nil
			ot.answered(&a)
			_, refused := a.err.(*opencodeHTTPError)
			switch {
			case a.err == nil:
				// The events already here first: they came before the
				// answer's state.
				if ot.drain(ctx) || ot.reconcile(ctx, &a) {
					return end()
				}
				answer = &a
			case refused:
				ot.failure = errs.Wrap(a.err, errs.TaskFailed, "opencode refused the prompt")
				return end()
			case errs.Is(a.err, errs.WorkerCrashed):
				return gone(a.err)
			default:
				// An answer that cannot be read: the events tell the
				// end.
			}
		case <-ot.rt.events:
			// The event stream ended: the server went away.
			select {
			case <-ot.rt.Done():
			case <-time.After(2 * time.Second):
			}
			return gone(runtime.Crash(ot.rt.Proc, nil))
		case <-ot.rt.Done():
			return gone(runtime.Crash(ot.rt.Proc, nil))
		case <-done:
			done = nil
			interrupted = true
			// Owned by the turn (run waits for ot.wg); bounded by the
			// grace, after which the runtime is killed.
			ot.wg.Go(func() {
				ictx, cancel := context.WithTimeout(context.Background(), runtime.InterruptGrace)
				defer cancel()
				_ = ot.rt.do(ictx, http.MethodPost, "/session/"+url.PathEscape(ot.rt.session)+"/abort", nil, nil)
			})
			grace = time.After(runtime.InterruptGrace)
		case <-grace:
			ot.rt.Kill()
			return gone(nil)
		}
	}
}

// answered notes the prompt's final message (completed: opencode then
// publishes its completion, followed by the session's idle).
func (ot *opencodeTurn) answered(a *ocAnswer) {
	if a.err == nil && a.msg.Info.Role == "assistant" && a.msg.Info.Time.Completed != nil {
		ot.final = a.msg.Info.ID
	}
}

// drain handles the events waiting; it reports the turn's end (the
// session's idle).
func (ot *opencodeTurn) drain(ctx context.Context) bool {
	for ev, ok := ot.events.Next(); ok; ev, ok = ot.events.Next() {
		if ot.handle(ctx, ev) {
			return true
		}
	}
	return false
}

// reconcile ends the turn with the prompt's answer if the events have
// shown its message: it applies the message's last state as its last
// events would (its completion, then each part's final state) and reports
// true.
func (ot *opencodeTurn) reconcile(ctx context.Context, a *ocAnswer) bool {
	m := &a.msg
	if m.Info.ID == "" || m.Info.Role != "assistant" || ot.roles[m.Info.ID] != "assistant" {
		return false
	}
	ot.message(ctx, &m.Info, 0)
	for i := range m.Parts {
		ot.part(ctx, m.Parts[i], "")
	}
	return true
}

type ocMessageInfo struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	Role      string `json:"role"`
	Time      struct {
		Completed *float64 `json:"completed"`
	} `json:"time"`
	Tokens *struct {
		Input     int64 `json:"input"`
		Output    int64 `json:"output"`
		Reasoning int64 `json:"reasoning"`
		Cache     struct {
			Read  int64 `json:"read"`
			Write int64 `json:"write"`
		} `json:"cache"`
	} `json:"tokens"`
	Error *ocError `json:"error"`
}

type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message     string `json:"message"`
		StatusCode  int    `json:"statusCode"`
		IsRetryable bool   `json:"isRetryable"`
		ProviderID  string `json:"providerID"`
	} `json:"data"`
}

type ocPartInfo struct {
	ID        string `json:"id"`
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	Type      string `json:"type"`
	Text      string `json:"text"`
	Synthetic bool   `json:"synthetic"`
	Time      *struct {
		End *float64 `json:"end"`
	} `json:"time"`
	CallID string `json:"callID"`
	Tool   string `json:"tool"`
	State  struct {
		Status   string          `json:"status"`
		Input    json.RawMessage `json:"input"`
		Output   string          `json:"output"`
		Error    string          `json:"error"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"state"`
	Files []string `json:"files"`
}

// handle maps one event; end reports the turn's end.
func (ot *opencodeTurn) handle(ctx context.Context, ev ocEvent) (end bool) {
	p := ev.P
	if ev.Type == "permission.asked" || ev.Type == "permission.updated" {
		// Whichever session asks (the thread's, or a subagent's child
		// session): this server runs this thread's turn only.
		ot.wg.Go(func() { ot.approve(ctx, p) })
		return false
	}
	if sid := p.sessionID(); sid != "" && sid != ot.rt.session {
		return false // another session (a subagent's)
	}
	switch ev.Type {
	case "message.updated":
		if p.Info != nil {
			ot.message(ctx, p.Info, ev.seq)
		}
	case "message.part.updated":
		if p.Part == nil {
			break
		}
		role, known := ot.roles[p.Part.MessageID]
		if !known {
			ot.held = append(ot.held, ev)
			break
		}
		if role == "assistant" {
			ot.part(ctx, *p.Part, p.Delta)
		}
	case "message.part.delta":
		role, known := ot.roles[p.MessageID]
		if !known {
			ot.held = append(ot.held, ev)
			break
		}
		if role == "assistant" && p.Field == "text" {
			ot.textDelta(p.PartID, p.Delta)
		}
	case "session.error":
		if p.Error != nil && p.Error.Name != "MessageAbortedError" {
			ot.failure = opencodeFailure(p.Error)
		}
	case "session.status":
		switch p.Status.Type {
		case "busy", "retry":
			ot.begin(ev.seq)
		case "idle":
			return ot.started
		}
	case "session.idle":
		return ot.started
	}
	return false
}

// begin notes the prompt's start, shown by the event seq.
func (ot *opencodeTurn) begin(seq uint64) {
	if !ot.started {
		ot.started, ot.startSeq = true, seq
	}
}

// message maps a message's new state (event seq).
func (ot *opencodeTurn) message(ctx context.Context, info *ocMessageInfo, seq uint64) {
	if info.ID == "" {
		return
	}
	if _, known := ot.roles[info.ID]; !known {
		ot.roles[info.ID] = info.Role
		ot.release(ctx, info.ID)
	}
	if info.Role != "assistant" {
		return
	}
	ot.begin(seq)
	if info.Error != nil && info.Error.Name != "MessageAbortedError" {
		ot.failure = opencodeFailure(info.Error)
	}
	if info.Time.Completed != nil && info.Tokens != nil && !ot.counted[info.ID] {
		ot.counted[info.ID] = true
		tk := info.Tokens
		ot.usage.InputTokens += tk.Input
		ot.usage.OutputTokens += tk.Output
		ot.usage.ReasoningTokens += tk.Reasoning
		ot.usage.CachedInputTokens += tk.Cache.Read
	}
}

// release handles the held events of a message whose role is now known.
func (ot *opencodeTurn) release(ctx context.Context, messageID string) {
	held := ot.held
	ot.held = nil
	for _, ev := range held {
		if ev.P.messageID() == messageID {
			ot.handle(ctx, ev)
		} else {
			ot.held = append(ot.held, ev)
		}
	}
}

func (ot *opencodeTurn) textDelta(partID, delta string) {
	pt := ot.parts[partID]
	if pt == nil {
		pt = &ocPart{kind: api.KindAgentMessage, id: ot.t.Sink.StartItem(api.KindAgentMessage, runtime.MessagePayload{})}
		ot.parts[partID] = pt
	}
	if pt.id == "" || delta == "" {
		return
	}
	pt.text += delta
	ot.t.Sink.Delta(pt.id, runtime.TextDelta{Text: delta})
}

// part maps a part's new state.
func (ot *opencodeTurn) part(ctx context.Context, p ocPartInfo, delta string) {
	s := ot.t.Sink
	switch p.Type {
	case "text":
		if p.Synthetic {
			return
		}
		pt := ot.parts[p.ID]
		if pt == nil {
			pt = &ocPart{kind: api.KindAgentMessage, id: s.StartItem(api.KindAgentMessage, runtime.MessagePayload{})}
			ot.parts[p.ID] = pt
		}
		if pt.id == "" {
			return
		}
		// The part carries its whole text; report what is new.
		if delta == "" && strings.HasPrefix(p.Text, pt.text) {
			delta = p.Text[len(pt.text):]
		}
		if delta != "" {
			pt.text += delta
			s.Delta(pt.id, runtime.TextDelta{Text: delta})
		}
		if p.Time != nil && p.Time.End != nil {
			text := runtime.FirstNonEmpty(p.Text, pt.text)
			s.CompleteItem(pt.id, api.ItemCompleted, runtime.MessagePayload{Text: text})
			if strings.TrimSpace(text) != "" {
				s.Response(text)
			}
			pt.id = ""
		}
	case "tool":
		ot.tool(p)
	case "patch":
		if len(p.Files) == 0 || ot.parts[p.ID] != nil {
			return
		}
		fc := runtime.FileChangesPayload{Changes: []runtime.FileChange{}}
		for _, f := range p.Files {
			fc.Changes = append(fc.Changes, runtime.FileChange{Path: f, Action: "update"})
		}
		id := s.StartItem(api.KindFileChange, fc)
		s.CompleteItem(id, api.ItemCompleted, fc)
		ot.parts[p.ID] = &ocPart{kind: api.KindFileChange}
	}
}

// tool maps a tool part: bash to a command execution, edit/write/patch
// to a file change; other tools (read, grep, …) are not items.
func (ot *opencodeTurn) tool(p ocPartInfo) {
	s := ot.t.Sink
	var in struct {
		Command     string `json:"command"`
		FilePath    string `json:"filePath"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(p.State.Input, &in)
	pt := ot.parts[p.ID]
	if pt == nil {
		pt = &ocPart{}
		ot.parts[p.ID] = pt
		switch p.Tool {
		case "bash":
			pt.kind = api.KindCommandExecution
		case "edit", "write", "patch", "multiedit", "apply_patch":
			pt.kind = api.KindFileChange
		default:
			return
		}
	}
	if pt.kind == "" {
		return
	}
	if !pt.shown && (len(p.State.Input) > 2 || p.State.Status != "pending") {
		pt.shown = true
		switch pt.kind {
		case api.KindCommandExecution:
			pt.cmd = runtime.CommandPayload{Command: []string{in.Command}, Cwd: ot.t.Workspace}
			pt.id = s.StartItem(api.KindCommandExecution, pt.cmd)
		case api.KindFileChange:
			pt.fc = runtime.FileChangesPayload{Changes: []runtime.FileChange{}}
			if in.FilePath != "" {
				// The part is shown before the tool runs: OpenCode asks
				// deepcode for every edit first (permission "ask").
				action := "update"
				if p.Tool == "write" {
					action = runtime.NewFileAction(in.FilePath, ot.t.Workspace)
				}
				pt.fc.Changes = append(pt.fc.Changes, runtime.FileChange{Path: in.FilePath, Action: action})
			}
			pt.id = s.StartItem(api.KindFileChange, pt.fc)
		}
	}
	if pt.id == "" || (p.State.Status != "completed" && p.State.Status != "error") {
		return
	}
	st := api.ItemCompleted
	if p.State.Status == "error" {
		st = api.ItemFailed
	}
	switch pt.kind {
	case api.KindCommandExecution:
		var md struct {
			Output string `json:"output"`
			Exit   *int   `json:"exit"`
		}
		_ = json.Unmarshal(p.State.Metadata, &md)
		out := runtime.FirstNonEmpty(p.State.Output, md.Output, p.State.Error)
		c := pt.cmd
		c.ExitCode = md.Exit
		c.Output = runtime.LastRunes(out, runtime.OutputTail)
		c.OutputBytes = int64(len(out))
		if out != "" {
			s.Delta(pt.id, runtime.OutputDelta{Stream: "stdout", Text: out})
		}
		if md.Exit != nil && *md.Exit != 0 {
			st = api.ItemFailed
		}
		s.CompleteItem(pt.id, st, c)
	case api.KindFileChange:
		s.CompleteItem(pt.id, st, pt.fc)
	}
	pt.id = ""
}

// closeItems fails the items left open (the turn ended without them).
func (ot *opencodeTurn) closeItems() {
	for _, pt := range ot.parts {
		if pt.id == "" {
			continue
		}
		switch pt.kind {
		case api.KindAgentMessage:
			ot.t.Sink.CompleteItem(pt.id, api.ItemFailed, runtime.MessagePayload{Text: pt.text})
		case api.KindCommandExecution:
			ot.t.Sink.CompleteItem(pt.id, api.ItemFailed, pt.cmd)
		default:
			ot.t.Sink.CompleteItem(pt.id, api.ItemFailed, pt.fc)
		}
		pt.id = ""
	}
}

func (ot *opencodeTurn) finishUsage() {
	if ot.usage.InputTokens > 0 || ot.usage.OutputTokens > 0 {
		ot.t.Sink.Usage(ot.usage)
	}
}

// opencodeFailure maps an opencode message error to deepcode's codes.
func opencodeFailure(e *ocError) error {
	msg := strings.TrimSpace(e.Data.Message)
	if len(msg) > 500 {
		msg = runtime.LastRunes(msg, 500)
	}
	low := strings.ToLower(msg)
	status := e.Data.StatusCode
	switch {
	case e.Name == "ProviderAuthError" || status == 401 || status == 403:
		return errs.New(errs.ProviderAuthFailed, "the model provider refused opencode's credentials: %s", msg)
	case status == 429 || status == 529 || strings.Contains(low, "rate limit") || strings.Contains(low, "overloaded"):
		return errs.New(errs.ProviderRateLimited, "the model provider is rate limiting opencode: %s", msg)
	case status >= 500 || strings.Contains(low, "connect") || strings.Contains(low, "unable to reach"):
		return errs.New(errs.ProviderUnavailable, "opencode cannot reach its model provider: %s", msg)
	}
	if msg == "" {
		msg = e.Name
	}
	return errs.New(errs.TaskFailed, "opencode failed the turn: %s", msg)
}

// approve turns an opencode permission request into a deepcode approval
// and replies with the decision.
func (ot *opencodeTurn) approve(ctx context.Context, p *ocProps) {
	perm := runtime.FirstNonEmpty(p.Permission, p.Type)
	var md struct {
		Command  string `json:"command"`
		FilePath string `json:"filepath"`
		Path     string `json:"filePath"`
	}
	_ = json.Unmarshal(p.Metadata, &md)
	details := map[string]string{"provider": "opencode", "permission": perm}
	kind, summary := "tool", runtime.FirstNonEmpty(p.Title, perm)
	switch perm {
	case "bash":
		cmd := runtime.FirstNonEmpty(md.Command, strings.Join(p.Patterns, " "))
		kind, summary = "command", cmd
		details["command"] = cmd
		details["cwd"] = ot.t.Workspace
	case "edit", "write":
		path := runtime.FirstNonEmpty(md.FilePath, md.Path, strings.Join(p.Patterns, " "))
		kind, summary = "fileChange", "edit "+path
		details["path"] = path
	default:
		if len(p.Patterns) > 0 {
			details["patterns"] = strings.Join(p.Patterns, " ")
			summary = perm + " " + details["patterns"]
		}
	}
	if p.Title != "" {
		details["reason"] = p.Title
	}
	ok, err := ot.t.Sink.Approve(ctx, kind, summary, details)
	reply, msg := "reject", "denied by the user (deepcode approval)"
	switch {
	case err != nil:
		msg = "the turn was stopped"
	case ok:
		reply, msg = "once", ""
	}
	_ = ot.rt.replyPermission(p.ID, reply, msg)
}
