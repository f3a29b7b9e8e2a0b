// Package script is the "script" provider: the prompt is a small
// deterministic script, for tests and demos.
package script

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Provider runs the prompt as a small deterministic script, one step
// per line, for tests and demos:
//
//	say <text>              an agent message (streamed word by word)
//	sleep <duration>        wait (interruptible)
//	approve <summary>       ask for approval; a denial fails the turn
//	write <path> <text>     create or replace a workspace file (a file change)
//	append <path> <text>    append a line to a workspace file
//	session <id>            record the provider session id
//	say-session             say the session id the turn started with
//	await-steer [duration]  wait for steering input and say it
//	usage <input> <output>  record the turn's token usage (a tokenUsage item)
//	fail <CODE> [message]   end the turn with that error code
//
// Blank lines and lines starting with # are ignored.
type Provider struct{}

func (Provider) CanSteer() bool { return true }

// FilePayload is a file change item's payload.
type FilePayload struct {
	Path   string `json:"path"`
	Action string `json:"action"`
	Bytes  int    `json:"bytes"`
	// Before and After are the file's text around the change, for a diff;
	// both are absent and Truncated is set when either is over
	// maxDiffText or not UTF-8 text.
	Before    *string `json:"before,omitempty"`
	After     *string `json:"after,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
}

// maxDiffText bounds the text a file-change item carries for its diff.
const maxDiffText = 64 << 10

// withContent adds the before and after text to a completed change when
// both are small text.
func (p FilePayload) withContent(before []byte, existed bool, after []byte) FilePayload {
	if len(before) > maxDiffText || len(after) > maxDiffText || !utf8.Valid(before) || !utf8.Valid(after) ||
		bytes.IndexByte(before, 0) >= 0 || bytes.IndexByte(after, 0) >= 0 {
		p.Truncated = true
		return p
	}
	b, a := string(before), string(after)
	if existed {
		p.Before = &b
	}
	p.After = &a
	return p
}

func (Provider) Run(ctx context.Context, t *runtime.TurnRun) error {
	for n, line := range strings.Split(t.Prompt, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		var err error
		switch verb {
		case "say":
			say(t.Sink, rest)
		case "say-session":
			say(t.Sink, "session: "+t.SessionID)
		case "sleep":
			err = sleepStep(ctx, rest)
		case "approve":
			ok, aerr := t.Sink.Approve(ctx, "script", rest, map[string]string{"step": line})
			switch {
			case aerr != nil:
				err = aerr
			case !ok:
				err = errs.New(errs.TaskFailed, "approval denied: %s", rest)
			}
		case "write", "append":
			err = writeStep(t, verb, rest)
		case "session":
			if rest == "" {
				err = errs.New(errs.InvalidParams, "line %d: session needs an id", n+1)
			} else {
				t.Sink.SetSession(rest)
			}
		case "await-steer":
			err = awaitSteer(ctx, t, rest)
		case "usage":
			err = usageStep(t.Sink, rest)
		case "fail":
			code, msg, _ := strings.Cut(rest, " ")
			if code == "" {
				code = string(errs.TaskFailed)
			}
			if msg == "" {
				msg = "the script failed"
			}
			c := errs.Code(code)
			err = &errs.Error{Code: c, Message: msg, Retryable: c.Retryable()}
		default:
			err = errs.New(errs.InvalidParams, "line %d: unknown script step %q (say, sleep, approve, write, append, session, say-session, await-steer, usage, fail)", n+1, verb)
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
	}
	return nil
}

func say(s runtime.Sink, text string) {
	item := s.StartItem(api.KindAgentMessage, runtime.MessagePayload{})
	words := strings.SplitAfter(text, " ")
	for i := 0; i < len(words); i += 8 {
		s.Delta(item, runtime.TextDelta{Text: strings.Join(words[i:min(i+8, len(words))], "")})
	}
	s.CompleteItem(item, api.ItemCompleted, runtime.MessagePayload{Text: text})
	s.Response(text)
}

func usageStep(s runtime.Sink, arg string) error {
	var in, out int64
	if n, err := fmt.Sscanf(arg, "%d %d", &in, &out); err != nil || n != 2 || in < 0 || out < 0 {
		return errs.New(errs.InvalidParams, "usage needs the input and output token counts, such as \"usage 120 30\", not %q", arg)
	}
	s.Usage(runtime.UsagePayload{InputTokens: in, OutputTokens: out})
	return nil
}

func sleepStep(ctx context.Context, arg string) error {
	d, err := time.ParseDuration(arg)
	if err != nil || d < 0 {
		return errs.New(errs.InvalidParams, "sleep needs a duration such as 500ms, not %q", arg)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func writeStep(t *runtime.TurnRun, verb, rest string) error {
	rel, text, _ := strings.Cut(rest, " ")
	if rel == "" {
		return errs.New(errs.InvalidParams, "%s needs a path", verb)
	}
	path := filepath.Join(t.Workspace, filepath.FromSlash(rel))
	if r, err := filepath.Rel(t.Workspace, path); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return errs.New(errs.InvalidParams, "%s: %q is outside the workspace", verb, rel)
	}
	item := t.Sink.StartItem(api.KindFileChange, FilePayload{Path: rel, Action: verb})
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Sink.CompleteItem(item, api.ItemFailed, FilePayload{Path: rel, Action: verb})
		return errs.Wrap(err, errs.TaskFailed, "cannot create the folder of %s", rel)
	}
	// What the file held, for the item's diff (bounded: a large file is
	// only marked).
	var before []byte
	existed := false
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		existed = true
		if fi.Size() <= maxDiffText {
			before, _ = os.ReadFile(path)
		} else {
			before = make([]byte, maxDiffText+1)
		}
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	data := text
	if verb == "append" {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		data = text + "\n"
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err == nil {
		_, err = f.WriteString(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Sink.CompleteItem(item, api.ItemFailed, FilePayload{Path: rel, Action: verb})
		return errs.Wrap(err, errs.TaskFailed, "cannot write %s", rel)
	}
	after := []byte(data)
	if verb == "append" {
		after = append(append([]byte{}, before...), data...)
	}
	t.Sink.CompleteItem(item, api.ItemCompleted, FilePayload{Path: rel, Action: verb, Bytes: len(data)}.withContent(before, existed, after))
	return nil
}

func awaitSteer(ctx context.Context, t *runtime.TurnRun, arg string) error {
	d := 30 * time.Second
	if arg != "" {
		var err error
		if d, err = time.ParseDuration(arg); err != nil {
			return errs.New(errs.InvalidParams, "await-steer needs a duration, not %q", arg)
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case text := <-t.Steer:
		say(t.Sink, "steered: "+text)
		return nil
	case <-timer.C:
		return errs.New(errs.TaskFailed, "no steering input within %s", d)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
