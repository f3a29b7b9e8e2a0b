// Package codex is the "codex" provider: turns run through OpenAI's codex
// CLI (codex app-server), one warm app-server per thread.
package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Provider runs turns through `codex app-server`: JSON-RPC lines on
// stdio (no "jsonrpc" member). One app-server per thread, kept warm by the
// runtime pool; its thread id is the durable provider session id, resumed
// with thread/resume by a new app-server (after an idle close or an agentd
// restart).
//
// Approvals: the thread runs with codex's "untrusted" approval policy and
// the workspace-write sandbox, so codex asks before every command that is
// not known to be safe and before file changes outside the sandbox. Each
// request (item/commandExecution/requestApproval,
// item/fileChange/requestApproval) becomes a deepcode approval decided by
// the profile's approval_policy: "ask" waits for a client's
// approval/respond, "auto" approves, "never" denies.
type Provider struct{}

func (Provider) CanSteer() bool { return false }

// cxMsg is one JSON-RPC message of the app-server.
type cxMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// codexRuntime is a running app-server with its codex thread.
type codexRuntime struct {
	*runtime.Proc
	thread string // codex thread id: the provider session id

	next    atomic.Int64
	mu      sync.Mutex
	pending map[string]chan cxMsg
	handler func(cxMsg) // the running turn's; nil between turns
}

func (rt *codexRuntime) readLoop() {
	sc := bufio.NewScanner(rt.Stdout())
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m cxMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		if m.Method == "" {
			rt.mu.Lock()
			ch := rt.pending[string(m.ID)]
			delete(rt.pending, string(m.ID))
			rt.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		rt.mu.Lock()
		h := rt.handler
		rt.mu.Unlock()
		switch {
		case h != nil:
			h(m)
		case m.ID != nil:
			// A request with no turn to answer it: refuse.
			_ = rt.reply(m.ID, nil, &rpcErr{Code: -32000, Message: "no turn is running"})
		}
	}
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (rt *codexRuntime) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return rt.WriteLine(b)
}

func (rt *codexRuntime) reply(id json.RawMessage, result any, e *rpcErr) error {
	if e != nil {
		return rt.send(map[string]any{"id": id, "error": e})
	}
	return rt.send(map[string]any{"id": id, "result": result})
}

func (rt *codexRuntime) notify(method string, params any) error {
	m := map[string]any{"method": method}
	if params != nil {
		m["params"] = params
	}
	return rt.send(m)
}

// call sends a request and waits for its response.
func (rt *codexRuntime) call(ctx context.Context, method string, params, result any) error {
	id := rt.next.Add(1)
	key := strconv.FormatInt(id, 10)
	ch := make(chan cxMsg, 1)
	rt.mu.Lock()
	rt.pending[key] = ch
	rt.mu.Unlock()
	defer func() {
		rt.mu.Lock()
		delete(rt.pending, key)
		rt.mu.Unlock()
	}()
	if err := rt.send(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		return runtime.Crash(rt.Proc, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return &codexCallError{method: method, code: m.Error.Code, msg: m.Error.Message}
		}
		if result != nil && len(m.Result) > 0 {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-rt.Done():
		return runtime.Crash(rt.Proc, nil)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

type codexCallError struct {
	method string
	code   int
	msg    string
}

func (e *codexCallError) Error() string {
	return fmt.Sprintf("codex %s: %d %s", e.method, e.code, e.msg)
}

// codexArgs is the app-server's command line: a profile with base_url gets
// a "deepcode" model provider speaking the Responses API there, with the
// key from OPENAI_API_KEY.
func codexArgs(bin string, t *runtime.TurnRun) []string {
	argv := []string{bin, "app-server"}
	if u := t.Profile.BaseURL; u != "" {
		argv = append(argv,
			"-c", `model_provider="deepcode"`,
			"-c", `model_providers.deepcode.name="deepcode"`,
			"-c", "model_providers.deepcode.base_url="+strconv.Quote(u),
			"-c", `model_providers.deepcode.env_key="OPENAI_API_KEY"`,
			"-c", `model_providers.deepcode.wire_api="responses"`,
		)
	}
	return append(argv, t.Profile.Args...)
}

func (Provider) key(t *runtime.TurnRun, bin string) string {
	p := t.Profile
	return strings.Join(append([]string{"codex", t.ProfileName, bin, p.BaseURL, p.CredentialsFile, t.Workspace, fmt.Sprint(p.Env)}, p.Args...), "\x00")
}

func (cp Provider) start(ctx context.Context, t *runtime.TurnRun, bin string) (runtime.Instance, error) {
	env, secrets, err := runtime.Env("codex", t.Profile, nil)
	if err != nil {
		return nil, err
	}
	// codex refuses a CODEX_HOME that does not exist: a profile that names
	// one gets it created, private.
	for _, kv := range env {
		if home, ok := strings.CutPrefix(kv, "CODEX_HOME="); ok && home != "" {
			_ = os.MkdirAll(home, 0o700)
		}
	}
	proc, err := runtime.StartProc(runtime.ProcSpec{Name: "codex", Argv: codexArgs(bin, t), Dir: t.Workspace, Env: env, Secrets: secrets})
	if err != nil {
		return nil, err
	}
	rt := &codexRuntime{Proc: proc, pending: map[string]chan cxMsg{}}
	go rt.readLoop()
	ok := false
	defer func() {
		if !ok {
			proc.Close()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := rt.call(sctx, "initialize", map[string]any{"clientInfo": map[string]string{"name": "deepcode", "title": "deepcode agentd", "version": "1"}}, nil); err != nil {
		return nil, runtime.StartErr(proc, err)
	}
	if err := rt.notify("initialized", nil); err != nil {
		return nil, runtime.StartErr(proc, err)
	}
	params := map[string]any{"cwd": t.Workspace, "approvalPolicy": "untrusted", "sandbox": "workspace-write"}
	if m := runtime.FirstNonEmpty(t.Model, t.Profile.Model); m != "" {
		params["model"] = m
	}
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	method := "thread/start"
	if t.SessionID != "" {
		method = "thread/resume"
		params["threadId"] = t.SessionID
		params["excludeTurns"] = true
	}
	if err := rt.call(sctx, method, params, &res); err != nil {
		var ce *codexCallError
		if t.SessionID != "" && errors.As(err, &ce) {
			e := errs.Wrap(err, errs.ProviderUnavailable, "codex cannot resume its session %s of this thread", t.SessionID)
			e.Retryable = false
			return nil, e
		}
		return nil, runtime.StartErr(proc, err)
	}
	if res.Thread.ID == "" {
		return nil, errs.New(errs.ProviderUnavailable, "codex answered %s without a thread", method)
	}
	rt.thread = res.Thread.ID
	ok = true
	return rt, nil
}

func (cp Provider) Run(ctx context.Context, t *runtime.TurnRun) error {
	bin, err := runtime.ResolveBinary(t)
	if err != nil {
		return err
	}
	r, release, _, err := t.Pool.Acquire(ctx, t.ThreadID, cp.key(t, bin), func(ctx context.Context) (runtime.Instance, error) { return cp.start(ctx, t, bin) })
	if err != nil {
		return err
	}
	rt := r.(*codexRuntime)
	keep := false
	defer func() { release(keep) }()
	if rt.thread != t.SessionID {
		t.Sink.SetSession(rt.thread)
	}
	tt := &codexTurn{t: t, rt: rt, items: map[string]*cxItem{}, events: runtime.NewInbox[cxMsg]()}
	rt.mu.Lock()
	rt.handler = tt.events.Put
	rt.mu.Unlock()
	defer func() {
		rt.mu.Lock()
		rt.handler = nil
		rt.mu.Unlock()
	}()
	keep, err = tt.run(ctx)
	return err
}

// cxItem is a codex item mapped to a deepcode item.
type cxItem struct {
	id   string // deepcode item id
	kind string
	cmd  runtime.CommandPayload
	text strings.Builder
}

type codexTurn struct {
	t      *runtime.TurnRun
	rt     *codexRuntime
	turnID string
	items  map[string]*cxItem
	events *runtime.Inbox[cxMsg]
	usage  runtime.UsagePayload
	lastEr *codexTurnError
	wg     sync.WaitGroup
}

type codexTurnError struct {
	Message        string          `json:"message"`
	CodexErrorInfo json.RawMessage `json:"codexErrorInfo"`
}

// run starts the turn and follows it to its end; keep reports whether the
// runtime is in a known state for the next turn.
func (ct *codexTurn) run(ctx context.Context) (keep bool, err error) {
	t := ct.t
	params := map[string]any{"threadId": ct.rt.thread, "input": []any{map[string]any{"type": "text", "text": t.Prompt}}}
	if m := runtime.FirstNonEmpty(t.Model, t.Profile.Model); m != "" {
		params["model"] = m
	}
	if r := runtime.FirstNonEmpty(t.Reasoning, t.Profile.Reasoning); r != "" {
		params["effort"] = r
	}
	var res struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	if err := ct.rt.call(ctx, "turn/start", params, &res); err != nil {
		if ctx.Err() != nil {
			// Whether the turn started is unknown: do not reuse.
			return false, context.Cause(ctx)
		}
		return false, err
	}
	ct.turnID = res.Turn.ID
	defer ct.wg.Wait()
	var grace <-chan time.Time
	interrupted := false
	done := ctx.Done()
	for {
		select {
		case <-ct.events.Ready():
			for m, ok := ct.events.Next(); ok; m, ok = ct.events.Next() {
				if end, err := ct.handle(ctx, m); end {
					ct.finishUsage()
					if interrupted || ctx.Err() != nil {
						return true, context.Cause(ctx)
					}
					return true, err
				}
			}
		case <-ct.rt.Done():
			// Drain what it said before it went.
			for m, ok := ct.events.Next(); ok; m, ok = ct.events.Next() {
				_, _ = ct.handle(ctx, m)
			}
			ct.closeItems()
			if interrupted {
				return false, context.Cause(ctx)
			}
			return false, runtime.Crash(ct.rt.Proc, nil)
		case <-done:
			done = nil
			interrupted = true
			go func() {
				ictx, cancel := context.WithTimeout(context.Background(), runtime.InterruptGrace)
				defer cancel()
				_ = ct.rt.call(ictx, "turn/interrupt", map[string]string{"threadId": ct.rt.thread, "turnId": ct.turnID}, nil)
			}()
			grace = time.After(runtime.InterruptGrace)
		case <-grace:
			ct.rt.Kill()
			ct.closeItems()
			return false, context.Cause(ctx)
		}
	}
}

// handle maps one message; end reports the turn's end and its error.
func (ct *codexTurn) handle(ctx context.Context, m cxMsg) (end bool, err error) {
	s := ct.t.Sink
	switch m.Method {
	case "item/started", "item/completed":
		var p struct {
			Item json.RawMessage `json:"item"`
		}
		_ = json.Unmarshal(m.Params, &p)
		ct.item(m.Method == "item/completed", p.Item)
	case "item/agentMessage/delta":
		var p struct {
			ItemID string `json:"itemId"`
			Delta  string `json:"delta"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if it := ct.items[p.ItemID]; it != nil && p.Delta != "" {
			it.text.WriteString(p.Delta)
			s.Delta(it.id, runtime.TextDelta{Text: p.Delta})
		}
	case "item/commandExecution/outputDelta", "item/fileChange/outputDelta":
		var p struct {
			ItemID string `json:"itemId"`
			Delta  string `json:"delta"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if it := ct.items[p.ItemID]; it != nil && p.Delta != "" {
			s.Delta(it.id, runtime.OutputDelta{Stream: "stdout", Text: p.Delta})
		}
	case "thread/tokenUsage/updated":
		var p struct {
			TurnID     string `json:"turnId"`
			TokenUsage struct {
				Last struct {
					InputTokens       int64 `json:"inputTokens"`
					CachedInputTokens int64 `json:"cachedInputTokens"`
					OutputTokens      int64 `json:"outputTokens"`
					ReasoningTokens   int64 `json:"reasoningOutputTokens"`
					TotalTokens       int64 `json:"totalTokens"`
				} `json:"last"`
			} `json:"tokenUsage"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if p.TurnID == ct.turnID {
			l := p.TokenUsage.Last
			ct.usage.InputTokens += l.InputTokens
			ct.usage.CachedInputTokens += l.CachedInputTokens
			ct.usage.OutputTokens += l.OutputTokens
			ct.usage.ReasoningTokens += l.ReasoningTokens
			ct.usage.TotalTokens += l.TotalTokens
		}
	case "error":
		var p struct {
			TurnID    string         `json:"turnId"`
			Error     codexTurnError `json:"error"`
			WillRetry bool           `json:"willRetry"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if !p.WillRetry {
			ct.lastEr = &p.Error
		}
	case "item/commandExecution/requestApproval", "item/fileChange/requestApproval", "execCommandApproval", "applyPatchApproval":
		ct.wg.Add(1)
		go func() { defer ct.wg.Done(); ct.approve(ctx, m) }()
	case "turn/completed":
		var p struct {
			Turn struct {
				ID     string          `json:"id"`
				Status string          `json:"status"`
				Error  *codexTurnError `json:"error"`
			} `json:"turn"`
		}
		_ = json.Unmarshal(m.Params, &p)
		if ct.turnID != "" && p.Turn.ID != ct.turnID {
			return false, nil
		}
		ct.closeItems()
		switch p.Turn.Status {
		case "completed":
			return true, nil
		case "interrupted":
			return true, errs.New(errs.ProviderCancelled, "codex interrupted the turn")
		default:
			e := p.Turn.Error
			if e == nil {
				e = ct.lastEr
			}
			return true, codexFailure(e)
		}
	default:
		if m.ID != nil {
			// Other requests (user input, MCP elicitation, …) are not
			// supported by deepcode: refuse them, so the turn goes on.
			_ = ct.rt.reply(m.ID, nil, &rpcErr{Code: -32601, Message: "deepcode does not support " + m.Method})
		}
	}
	return false, nil
}

// codexFailure maps a failed turn's error to deepcode's codes.
func codexFailure(e *codexTurnError) error {
	if e == nil {
		return errs.New(errs.TaskFailed, "codex failed the turn")
	}
	info := string(e.CodexErrorInfo)
	msg := strings.TrimSpace(e.Message)
	if len(msg) > 500 {
		msg = runtime.LastRunes(msg, 500)
	}
	switch {
	case strings.Contains(info, "unauthorized") || strings.Contains(info, "401"):
		return errs.New(errs.ProviderAuthFailed, "the model provider refused codex's credentials: %s", msg)
	case strings.Contains(info, "rateLimitExceeded") || strings.Contains(info, "usageLimitExceeded") ||
		strings.Contains(info, "serverOverloaded") || strings.Contains(info, "429"):
		return errs.New(errs.ProviderRateLimited, "the model provider is rate limiting codex: %s", msg)
	case strings.Contains(info, "httpConnectionFailed") || strings.Contains(info, "responseStreamConnectionFailed") ||
		strings.Contains(info, "responseTooManyFailedAttempts") || strings.Contains(info, "internalServerError"):
		return errs.New(errs.ProviderUnavailable, "codex cannot reach its model provider: %s", msg)
	}
	return errs.New(errs.TaskFailed, "codex failed the turn: %s", msg)
}

type codexItem struct {
	Type             string  `json:"type"`
	ID               string  `json:"id"`
	Text             string  `json:"text"`
	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	Status           string  `json:"status"`
	ExitCode         *int    `json:"exitCode"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	Changes          []struct {
		Path string          `json:"path"`
		Kind json.RawMessage `json:"kind"`
	} `json:"changes"`
}

func (ct *codexTurn) item(completed bool, raw json.RawMessage) {
	var ci codexItem
	if json.Unmarshal(raw, &ci) != nil || ci.ID == "" {
		return
	}
	s := ct.t.Sink
	it := ct.items[ci.ID]
	if it == nil {
		it = &cxItem{}
		switch ci.Type {
		case "agentMessage":
			it.kind = api.KindAgentMessage
			it.id = s.StartItem(api.KindAgentMessage, runtime.MessagePayload{})
		case "commandExecution":
			it.kind = api.KindCommandExecution
			it.cmd = runtime.CommandPayload{Command: []string{ci.Command}, Cwd: ci.Cwd}
			it.id = s.StartItem(api.KindCommandExecution, it.cmd)
		case "fileChange":
			it.kind = api.KindFileChange
			it.id = s.StartItem(api.KindFileChange, fileChanges(ci))
		default:
			return
		}
		ct.items[ci.ID] = it
	}
	if !completed || it.id == "" {
		return
	}
	switch it.kind {
	case api.KindAgentMessage:
		text := ci.Text
		if text == "" {
			text = it.text.String()
		}
		s.CompleteItem(it.id, api.ItemCompleted, runtime.MessagePayload{Text: text})
		if strings.TrimSpace(text) != "" {
			s.Response(text)
		}
	case api.KindCommandExecution:
		p := it.cmd
		p.ExitCode = ci.ExitCode
		if ci.AggregatedOutput != nil {
			p.Output = runtime.LastRunes(*ci.AggregatedOutput, runtime.OutputTail)
			p.OutputBytes = int64(len(*ci.AggregatedOutput))
		}
		st := api.ItemCompleted
		if ci.Status != "completed" || (ci.ExitCode != nil && *ci.ExitCode != 0) {
			st = api.ItemFailed
		}
		s.CompleteItem(it.id, st, p)
	case api.KindFileChange:
		st := api.ItemCompleted
		if ci.Status != "completed" {
			st = api.ItemFailed
		}
		s.CompleteItem(it.id, st, fileChanges(ci))
	}
	it.id = "" // completed
}

func fileChanges(ci codexItem) runtime.FileChangesPayload {
	p := runtime.FileChangesPayload{Changes: []runtime.FileChange{}}
	for _, c := range ci.Changes {
		var kind struct {
			Type string `json:"type"`
		}
		var s string
		action := "update"
		if json.Unmarshal(c.Kind, &s) == nil {
			action = s
		} else if json.Unmarshal(c.Kind, &kind) == nil && kind.Type != "" {
			action = kind.Type
		}
		p.Changes = append(p.Changes, runtime.FileChange{Path: c.Path, Action: action})
	}
	return p
}

// closeItems fails the items left open (the turn ended without them).
func (ct *codexTurn) closeItems() {
	for _, it := range ct.items {
		if it.id == "" {
			continue
		}
		switch it.kind {
		case api.KindAgentMessage:
			ct.t.Sink.CompleteItem(it.id, api.ItemFailed, runtime.MessagePayload{Text: it.text.String()})
		case api.KindCommandExecution:
			ct.t.Sink.CompleteItem(it.id, api.ItemFailed, it.cmd)
		default:
			ct.t.Sink.CompleteItem(it.id, api.ItemFailed, runtime.FileChangesPayload{Changes: []runtime.FileChange{}})
		}
		it.id = ""
	}
}

func (ct *codexTurn) finishUsage() {
	if ct.usage.TotalTokens > 0 || ct.usage.InputTokens > 0 {
		ct.t.Sink.Usage(ct.usage)
	}
}

// approve turns a codex approval request into a deepcode approval and
// answers codex with the decision.
func (ct *codexTurn) approve(ctx context.Context, m cxMsg) {
	var p struct {
		Command  json.RawMessage `json:"command"`
		Cwd      string          `json:"cwd"`
		Reason   string          `json:"reason"`
		ItemID   string          `json:"itemId"`
		GrantRot string          `json:"grantRoot"`
	}
	_ = json.Unmarshal(m.Params, &p)
	kind, summary := "command", ""
	var cmd string
	if json.Unmarshal(p.Command, &cmd) != nil {
		var argv []string
		_ = json.Unmarshal(p.Command, &argv)
		cmd = strings.Join(argv, " ")
	}
	details := map[string]string{"provider": "codex"}
	switch m.Method {
	case "item/fileChange/requestApproval", "applyPatchApproval":
		kind, summary = "fileChange", "apply file changes"
		if p.Reason != "" {
			summary += ": " + p.Reason
		}
	default:
		summary = cmd
		details["command"] = cmd
		details["cwd"] = p.Cwd
	}
	if p.Reason != "" {
		details["reason"] = p.Reason
	}
	ok, err := ct.t.Sink.Approve(ctx, kind, summary, details)
	decision := "decline"
	switch {
	case err != nil:
		decision = "cancel"
	case ok:
		decision = "accept"
	}
	if m.Method == "execCommandApproval" || m.Method == "applyPatchApproval" {
		// The legacy requests take ReviewDecision values.
		decision = map[string]string{"accept": "approved", "decline": "denied", "cancel": "abort"}[decision]
	}
	_ = ct.rt.reply(m.ID, map[string]string{"decision": decision}, nil)
}
