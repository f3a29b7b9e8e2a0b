// Package claude is the "claude" provider: turns run through Claude Code
// (claude in stream-json mode), one warm process per thread.
package claude

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/ids"
)

// Provider runs turns through Claude Code in streaming mode:
//
//	claude -p --input-format stream-json --output-format stream-json --verbose
//	       --include-partial-messages --permission-prompt-tool stdio
//	       --permission-mode default [--resume SESSION] [--model M]
//
// One process per thread, kept warm by the runtime pool: each turn is one
// user message on stdin, followed to its "result" line. The session id
// (system/init) is the durable provider session id; a new process resumes
// it with --resume.
//
// Approvals: with --permission-prompt-tool stdio Claude Code asks on its
// control channel (control_request can_use_tool) before every tool its
// permission mode does not allow by itself (with "default": commands and
// file edits); each becomes a deepcode approval decided by the profile's
// approval_policy, and the answer goes back as a control_response.
// Interrupts are control_request interrupt.
type Provider struct{}

func (Provider) CanSteer() bool { return false }

// claudeMsg is one line of Claude Code's stream.
type claudeMsg struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype"`
	SessionID string          `json:"session_id"`
	Message   json.RawMessage `json:"message"`
	Event     json.RawMessage `json:"event"`
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	Response  json.RawMessage `json:"response"`
	// system/api_retry
	ErrorStatus int    `json:"error_status"`
	ErrorText   string `json:"error"`
	// result
	IsError        bool            `json:"is_error"`
	Result         string          `json:"result"`
	APIErrorStatus json.RawMessage `json:"api_error_status"`
	Errors         []string        `json:"errors"`
	Usage          struct {
		InputTokens         int64 `json:"input_tokens"`
		OutputTokens        int64 `json:"output_tokens"`
		CacheReadInputToken int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

type claudeRuntime struct {
	*runtime.Proc
	mu      sync.Mutex
	session string
	handler func(claudeMsg)
}

func (rt *claudeRuntime) readLoop() {
	sc := bufio.NewScanner(rt.Stdout())
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m claudeMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		rt.mu.Lock()
		if m.SessionID != "" {
			rt.session = m.SessionID
		}
		h := rt.handler
		rt.mu.Unlock()
		if h != nil {
			h(m)
		} else if m.Type == "control_request" {
			_ = rt.controlResponse(m.RequestID, map[string]any{"behavior": "deny", "message": "no deepcode turn is running"})
		}
	}
}

func (rt *claudeRuntime) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return rt.WriteLine(b)
}

func (rt *claudeRuntime) controlResponse(id string, response any) error {
	return rt.send(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": id, "response": response}})
}

func (rt *claudeRuntime) sessionID() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.session
}

func claudeArgs(bin string, t *runtime.TurnRun) []string {
	argv := []string{bin, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool", "stdio", "--permission-mode", "default"}
	if m := runtime.FirstNonEmpty(t.Model, t.Profile.Model); m != "" {
		argv = append(argv, "--model", m)
	}
	if t.SessionID != "" {
		argv = append(argv, "--resume", t.SessionID)
	}
	return append(argv, t.Profile.Args...)
}

func (Provider) key(t *runtime.TurnRun, bin string) string {
	p := t.Profile
	return strings.Join(append([]string{"claude", t.ProfileName, bin, p.BaseURL, p.CredentialsFile, t.Workspace, runtime.FirstNonEmpty(t.Model, p.Model), fmt.Sprint(p.Env)}, p.Args...), "\x00")
}

func (cp Provider) start(t *runtime.TurnRun, bin string) (runtime.Instance, error) {
	extra := map[string]string{}
	if t.Profile.BaseURL != "" {
		extra["ANTHROPIC_BASE_URL"] = t.Profile.BaseURL
		// Telemetry and update checks would go elsewhere than the
		// configured endpoint.
		extra["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
	}
	extra["DISABLE_AUTOUPDATER"] = "1"
	env, secrets, err := runtime.Env("claude", t.Profile, extra)
	if err != nil {
		return nil, err
	}
	proc, err := runtime.StartProc(runtime.ProcSpec{Name: "claude", Argv: claudeArgs(bin, t), Dir: t.Workspace, Env: env, Secrets: secrets})
	if err != nil {
		return nil, err
	}
	rt := &claudeRuntime{Proc: proc, session: t.SessionID}
	go rt.readLoop()
	return rt, nil
}

func (cp Provider) Run(ctx context.Context, t *runtime.TurnRun) error {
	bin, err := runtime.ResolveBinary(t)
	if err != nil {
		return err
	}
	r, release, _, err := t.Pool.Acquire(ctx, t.ThreadID, cp.key(t, bin), func(context.Context) (runtime.Instance, error) { return cp.start(t, bin) })
	if err != nil {
		return err
	}
	rt := r.(*claudeRuntime)
	keep := false
	defer func() { release(keep) }()
	ct := &claudeTurn{t: t, rt: rt, tools: map[string]*claudeTool{}, blocks: map[int]*claudeBlock{}, events: runtime.NewInbox[claudeMsg]()}
	rt.mu.Lock()
	rt.handler = ct.events.Put
	rt.mu.Unlock()
	defer func() {
		rt.mu.Lock()
		rt.handler = nil
		rt.mu.Unlock()
	}()
	keep, err = ct.run(ctx)
	return err
}

type claudeTool struct {
	id   string // deepcode item id
	kind string
	cmd  runtime.CommandPayload
	fc   runtime.FileChangesPayload
}

type claudeBlock struct {
	id   string
	text strings.Builder
}

type claudeTurn struct {
	t       *runtime.TurnRun
	rt      *claudeRuntime
	session string
	tools   map[string]*claudeTool
	blocks  map[int]*claudeBlock // open text blocks by stream index
	events  *runtime.Inbox[claudeMsg]
	wg      sync.WaitGroup
	// fatal is a failure deepcode stopped the turn for (credentials that
	// Claude Code would retry for minutes).
	fatal error
}

func (ct *claudeTurn) run(ctx context.Context) (keep bool, err error) {
	defer ct.wg.Wait()
	ct.session = ct.rt.sessionID()
	if err := ct.rt.send(map[string]any{"type": "user", "message": map[string]any{"role": "user",
		"content": []any{map[string]any{"type": "text", "text": ct.t.Prompt}}}}); err != nil {
		return false, runtime.Crash(ct.rt.Proc, err)
	}
	var grace <-chan time.Time
	interrupted := false
	done := ctx.Done()
	for {
		select {
		case <-ct.events.Ready():
			for m, ok := ct.events.Next(); ok; m, ok = ct.events.Next() {
				end, err := ct.handle(ctx, m)
				if end {
					ct.closeItems()
					if ct.fatal != nil {
						return true, ct.fatal
					}
					if interrupted || ctx.Err() != nil {
						return true, context.Cause(ctx)
					}
					return true, err
				}
				if ct.fatal != nil && grace == nil {
					_ = ct.rt.send(map[string]any{"type": "control_request", "request_id": ids.New("int_"), "request": map[string]string{"subtype": "interrupt"}})
					grace = time.After(runtime.InterruptGrace)
				}
			}
		case <-ct.rt.Done():
			if ct.fatal != nil {
				return false, ct.fatal
			}
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
			_ = ct.rt.send(map[string]any{"type": "control_request", "request_id": ids.New("int_"), "request": map[string]string{"subtype": "interrupt"}})
			grace = time.After(runtime.InterruptGrace)
		case <-grace:
			ct.rt.Kill()
			ct.closeItems()
			if ct.fatal != nil {
				return false, ct.fatal
			}
			return false, context.Cause(ctx)
		}
	}
}

type claudeContent struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

func (ct *claudeTurn) handle(ctx context.Context, m claudeMsg) (end bool, err error) {
	s := ct.t.Sink
	if m.SessionID != "" && m.SessionID != ct.session {
		ct.session = m.SessionID
		s.SetSession(m.SessionID)
	}
	switch m.Type {
	case "system":
		if m.Subtype == "api_retry" && (m.ErrorStatus == 401 || m.ErrorStatus == 403) && ct.fatal == nil {
			ct.fatal = errs.New(errs.ProviderAuthFailed, "the model provider refused claude's credentials (%d %s)", m.ErrorStatus, m.ErrorText)
		}
	case "stream_event":
		var ev struct {
			Type         string `json:"type"`
			Index        int    `json:"index"`
			ContentBlock struct {
				Type string `json:"type"`
			} `json:"content_block"`
			Delta struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"delta"`
		}
		_ = json.Unmarshal(m.Event, &ev)
		switch ev.Type {
		case "message_start":
			ct.blocks = map[int]*claudeBlock{}
		case "content_block_start":
			if ev.ContentBlock.Type == "text" {
				ct.blocks[ev.Index] = &claudeBlock{id: s.StartItem(api.KindAgentMessage, runtime.MessagePayload{})}
			}
		case "content_block_delta":
			if b := ct.blocks[ev.Index]; b != nil && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				b.text.WriteString(ev.Delta.Text)
				s.Delta(b.id, runtime.TextDelta{Text: ev.Delta.Text})
			}
		case "content_block_stop":
			if b := ct.blocks[ev.Index]; b != nil {
				text := b.text.String()
				s.CompleteItem(b.id, api.ItemCompleted, runtime.MessagePayload{Text: text})
				if strings.TrimSpace(text) != "" {
					s.Response(text)
				}
				delete(ct.blocks, ev.Index)
			}
		}
	case "assistant":
		var msg struct {
			Content []claudeContent `json:"content"`
		}
		_ = json.Unmarshal(m.Message, &msg)
		for _, c := range msg.Content {
			if c.Type == "tool_use" && ct.tools[c.ID] == nil {
				ct.startTool(c)
			}
		}
	case "user":
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(m.Message, &msg)
		var parts []claudeContent
		_ = json.Unmarshal(msg.Content, &parts)
		for _, c := range parts {
			if c.Type == "tool_result" {
				ct.endTool(c)
			}
		}
	case "control_request":
		var req struct {
			Subtype  string          `json:"subtype"`
			ToolName string          `json:"tool_name"`
			Input    json.RawMessage `json:"input"`
		}
		_ = json.Unmarshal(m.Request, &req)
		if req.Subtype != "can_use_tool" {
			_ = ct.rt.send(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "error", "request_id": m.RequestID, "error": "not supported by deepcode"}})
			break
		}
		ct.wg.Add(1)
		go func() { defer ct.wg.Done(); ct.approve(ctx, m.RequestID, req.ToolName, req.Input) }()
	case "result":
		if m.Usage.InputTokens > 0 || m.Usage.OutputTokens > 0 {
			s.Usage(runtime.UsagePayload{InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens, CachedInputTokens: m.Usage.CacheReadInputToken})
		}
		if !m.IsError && m.Subtype == "success" {
			if strings.TrimSpace(m.Result) != "" {
				s.Response(m.Result)
			}
			return true, nil
		}
		return true, claudeFailure(m)
	}
	return false, nil
}

// claudeFailure maps a failed result to deepcode's codes.
func claudeFailure(m claudeMsg) error {
	msg := strings.TrimSpace(runtime.FirstNonEmpty(m.Result, strings.Join(m.Errors, "; ")))
	if len(msg) > 500 {
		msg = runtime.LastRunes(msg, 500)
	}
	var status int
	_ = json.Unmarshal(m.APIErrorStatus, &status)
	low := strings.ToLower(msg)
	switch {
	case status == 401 || status == 403 || strings.Contains(low, "authentication") || strings.Contains(low, "api key"):
		return errs.New(errs.ProviderAuthFailed, "the model provider refused claude's credentials: %s", msg)
	case status == 429 || status == 529 || strings.Contains(low, "rate limit") || strings.Contains(low, "overloaded"):
		return errs.New(errs.ProviderRateLimited, "the model provider is rate limiting claude: %s", msg)
	case status >= 500 || strings.Contains(low, "connection"):
		return errs.New(errs.ProviderUnavailable, "claude cannot reach its model provider: %s", msg)
	case m.Subtype == "error_during_execution" && msg == "":
		return errs.New(errs.ProviderCancelled, "claude stopped the turn")
	}
	if msg == "" {
		msg = m.Subtype
	}
	return errs.New(errs.TaskFailed, "claude failed the turn: %s", msg)
}

func (ct *claudeTurn) startTool(c claudeContent) {
	var in struct {
		Command  string `json:"command"`
		FilePath string `json:"file_path"`
	}
	_ = json.Unmarshal(c.Input, &in)
	tool := &claudeTool{}
	switch {
	case in.Command != "" || c.Name == "Bash":
		tool.kind = api.KindCommandExecution
		tool.cmd = runtime.CommandPayload{Command: []string{in.Command}, Cwd: ct.t.Workspace}
		tool.id = ct.t.Sink.StartItem(api.KindCommandExecution, tool.cmd)
	case in.FilePath != "" && c.Name != "Read":
		tool.kind = api.KindFileChange
		tool.fc = runtime.FileChangesPayload{Changes: []runtime.FileChange{{Path: in.FilePath, Action: claudeFileAction(c.Name, in.FilePath, ct.t.Workspace)}}}
		tool.id = ct.t.Sink.StartItem(api.KindFileChange, tool.fc)
	}
	ct.tools[c.ID] = tool
}

// claudeFileAction is what a file tool does to path: Write creates or
// replaces a file (runtime.NewFileAction), the others change one. The tool use is
// seen before the tool runs (Claude Code asks deepcode first).
func claudeFileAction(tool, path, workspace string) string {
	if tool != "Write" {
		return "update"
	}
	return runtime.NewFileAction(path, workspace)
}

func (ct *claudeTurn) endTool(c claudeContent) {
	tool := ct.tools[c.ToolUseID]
	if tool == nil || tool.id == "" {
		return
	}
	st := api.ItemCompleted
	if c.IsError {
		st = api.ItemFailed
	}
	switch tool.kind {
	case api.KindCommandExecution:
		out := textOfContent(c.Content)
		p := tool.cmd
		p.Output = runtime.LastRunes(out, runtime.OutputTail)
		p.OutputBytes = int64(len(out))
		if out != "" {
			ct.t.Sink.Delta(tool.id, runtime.OutputDelta{Stream: "stdout", Text: out})
		}
		ct.t.Sink.CompleteItem(tool.id, st, p)
	case api.KindFileChange:
		ct.t.Sink.CompleteItem(tool.id, st, tool.fc)
	}
	tool.id = ""
}

// textOfContent flattens a tool result's content: a string or text parts.
func textOfContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []claudeContent
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func (ct *claudeTurn) closeItems() {
	for i, b := range ct.blocks {
		ct.t.Sink.CompleteItem(b.id, api.ItemFailed, runtime.MessagePayload{Text: b.text.String()})
		delete(ct.blocks, i)
	}
	for _, tool := range ct.tools {
		if tool.id == "" {
			continue
		}
		if tool.kind == api.KindCommandExecution {
			ct.t.Sink.CompleteItem(tool.id, api.ItemFailed, tool.cmd)
		} else {
			ct.t.Sink.CompleteItem(tool.id, api.ItemFailed, tool.fc)
		}
		tool.id = ""
	}
}

// approve asks deepcode about a tool use and answers Claude Code.
func (ct *claudeTurn) approve(ctx context.Context, requestID, tool string, input json.RawMessage) {
	var in struct {
		Command     string `json:"command"`
		FilePath    string `json:"file_path"`
		Description string `json:"description"`
	}
	_ = json.Unmarshal(input, &in)
	kind, summary := "tool", tool
	details := map[string]string{"provider": "claude", "tool": tool}
	switch {
	case in.Command != "":
		kind, summary = "command", in.Command
		details["command"] = in.Command
		details["cwd"] = ct.t.Workspace
	case in.FilePath != "":
		kind, summary = "fileChange", tool+" "+in.FilePath
		details["path"] = in.FilePath
	}
	if in.Description != "" {
		details["reason"] = in.Description
	}
	ok, err := ct.t.Sink.Approve(ctx, kind, summary, details)
	var resp map[string]any
	switch {
	case err != nil:
		resp = map[string]any{"behavior": "deny", "message": "the turn was stopped", "interrupt": true}
	case ok:
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		resp = map[string]any{"behavior": "allow", "updatedInput": input}
	default:
		resp = map[string]any{"behavior": "deny", "message": "denied by the user (deepcode approval)"}
	}
	_ = ct.rt.controlResponse(requestID, resp)
}
