package native

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// maxResultForModel bounds what the model is told of one call.
const maxResultForModel = 32 << 10

// ApprovalDetails are the details of a tool call's approval request.
type ApprovalDetails struct {
	Provider  string          `json:"provider"`
	Tool      string          `json:"tool"`
	CallID    string          `json:"callId"`
	ItemID    string          `json:"itemId"`
	Arguments json.RawMessage `json:"arguments"`
	Command   string          `json:"command,omitempty"`
	Cwd       string          `json:"cwd,omitempty"`
	Path      string          `json:"path,omitempty"`
	Diff      string          `json:"diff,omitempty"`
	// Reproposed: the call was proposed before, and agentd stopped before
	// it could run.
	Reproposed bool `json:"reproposed,omitempty"`
}

// Run runs one turn: the thread's history and the new input go to the
// model, whose tool calls run (each journaled before it runs) until it
// answers without one. It returns nil when the turn completed.
func Run(ctx context.Context, t Turn, h Host) error {
	model := t.Model
	if model == "" {
		model = t.Profile.Model
	}
	if model == "" {
		e := errs.New(errs.ProviderUnavailable, "profile %q names no model: set profiles.%s.model (and base_url and api) in config.toml", t.ProfileName, t.ProfileName)
		e.Retryable = false
		return e
	}
	m, err := modelFor(t)
	if err != nil {
		return err
	}
	items, err := h.History(ctx)
	if err != nil {
		return err
	}
	conv := replay(items)
	r := &runner{t: &t, h: h, m: m, model: model, conv: conv.entries}
	defer r.reportUsage()
	if len(conv.repropose) > 0 {
		if err := r.repropose(ctx, conv.repropose); err != nil {
			return err
		}
	}
	for step := 1; ; step++ {
		if step > maxSteps {
			return errs.New(errs.TaskFailed, "the model made %d requests in this turn without finishing; the turn was stopped (continue it with a new turn)", maxSteps)
		}
		r.takeSteering()
		ans, err := r.ask(ctx, step)
		if err != nil {
			return err
		}
		if len(ans.calls) == 0 {
			if r.takeSteering() {
				continue // input arrived while it answered: it gets it
			}
			return nil
		}
		if err := r.handle(ctx, step, ans.calls); err != nil {
			return err
		}
	}
}

type runner struct {
	t     *Turn
	h     Host
	m     model
	model string
	conv  []entry
	usage Usage
	// trimmed is the most older turns left out so far (one item records
	// each new extent).
	trimmed int
	calls   int // calls of this turn, for ids the model did not give
}

func (r *runner) reportUsage() {
	if r.usage.TotalTokens > 0 || r.usage.InputTokens > 0 || r.usage.OutputTokens > 0 {
		if r.usage.TotalTokens == 0 {
			r.usage.TotalTokens = r.usage.InputTokens + r.usage.OutputTokens
		}
		r.h.Usage(r.usage)
	}
}

// takeSteering adds the inputs steered into the turn; it reports whether
// there were any.
func (r *runner) takeSteering() bool {
	got := false
	for {
		select {
		case text := <-r.t.Steer:
			r.conv = append(r.conv, entry{kind: userText, text: text, turn: r.t.TurnID})
			got = true
		default:
			return got
		}
	}
}

func (r *runner) system() string {
	return fmt.Sprintf(`You are deepcode, a coding agent. You work in the workspace %s (on %s/%s) for the user, with tools: shell runs commands, read_file, list, glob and grep look at files, write_file and edit change them. Paths are relative to the workspace. Tool calls may need the user's approval; a denied call did not run. Look before you change things, keep changes small, and when you are done say briefly what you did.`,
		r.t.Workspace, runtime.GOOS, runtime.GOARCH)
}

// ask sends the conversation to the model and records the answer's text
// and reasoning as items while they stream.
func (r *runner) ask(ctx context.Context, step int) (answer, error) {
	budget := r.t.Profile.ContextBudget
	if budget <= 0 {
		budget = defaultContextBudget
	}
	system := r.system()
	entries, tp := trim(r.conv, max(budget-len(system)/4, budget/2), r.t.TurnID)
	tp.Budget = budget
	if tp.DroppedTurns > r.trimmed {
		r.trimmed = tp.DroppedTurns
		id := r.h.StartItem(KindContextTrimmed, tp)
		r.h.CompleteItem(id, ItemCompleted, tp)
	}
	maxOut := int64(r.t.Profile.MaxOutputTokens)
	if maxOut <= 0 {
		maxOut = defaultMaxOutput
	}
	reasoning := r.t.Reasoning
	if reasoning == "" {
		reasoning = r.t.Profile.Reasoning
	}
	req := request{model: r.model, reasoning: reasoning, system: system, entries: entries, tools: toolSpecs(), maxOutput: maxOut}
	var msgItem, rsItem string
	var text, reason strings.Builder
	out := streamSink{
		text: func(d string) {
			if d == "" {
				return
			}
			if msgItem == "" {
				msgItem = r.h.StartItem(KindAgentMessage, MessagePayload{Step: step})
			}
			text.WriteString(d)
			r.h.Delta(msgItem, TextDelta{Text: d})
		},
		reasoning: func(d string) {
			if d == "" {
				return
			}
			if rsItem == "" {
				rsItem = r.h.StartItem(KindReasoning, ReasoningPayload{Step: step})
			}
			reason.WriteString(d)
			r.h.Delta(rsItem, TextDelta{Text: d})
		},
	}
	ans, err := r.m.stream(ctx, req, out)
	r.usage.add(ans.usage)
	status := ItemCompleted
	if err != nil {
		status = ItemFailed
	}
	if rsItem != "" {
		r.h.CompleteItem(rsItem, status, ReasoningPayload{Text: reason.String(), Step: step})
	}
	if msgItem != "" {
		r.h.CompleteItem(msgItem, status, MessagePayload{Text: text.String(), Step: step})
	}
	if err != nil {
		if ctx.Err() != nil {
			return ans, context.Cause(ctx)
		}
		return ans, modelError(err, *r.t)
	}
	if s := text.String(); s != "" {
		r.h.Response(s)
		r.conv = append(r.conv, entry{kind: assistantText, text: s, turn: r.t.TurnID})
	}
	for i := range ans.calls {
		r.calls++
		if ans.calls[i].ID == "" {
			ans.calls[i].ID = fmt.Sprintf("call_%s_%d", r.t.TurnID, r.calls)
		}
	}
	return ans, nil
}

// callPlan is a call to handle.
type callPlan struct {
	spec callSpec
	step int
	// from and fromPayload: the earlier record of a call proposed again.
	from        string
	fromPayload *ToolPayload
}

// handle runs the calls of one answer and adds them and their results to
// the conversation.
func (r *runner) handle(ctx context.Context, step int, calls []callSpec) error {
	plans := make([]callPlan, len(calls))
	for i, c := range calls {
		plans[i] = callPlan{spec: c, step: step}
	}
	results, err := r.runCalls(ctx, plans)
	for _, c := range calls {
		r.conv = append(r.conv, entry{kind: toolCallEntry, call: c, turn: r.t.TurnID})
	}
	r.conv = append(r.conv, results...)
	return err
}

// repropose proposes again the calls that never ran because agentd
// stopped first; their results go where the calls were.
func (r *runner) repropose(ctx context.Context, pending []pendingCall) error {
	plans := make([]callPlan, len(pending))
	for i, pc := range pending {
		p := pc.payload
		plans[i] = callPlan{spec: callSpec{ID: p.CallID, Name: p.Tool, Args: string(p.Arguments)}, from: pc.from, fromPayload: &p}
	}
	results, err := r.runCalls(ctx, plans)
	for i, pc := range pending {
		if i < len(results) {
			turn := r.conv[pc.result].turn
			r.conv[pc.result] = results[i]
			r.conv[pc.result].turn = turn
		}
	}
	return err
}

// runCalls journals the calls as proposed (one transaction), then, one
// after the other, asks for their approval, journals each as running
// before it runs, and records its outcome. On interrupt the calls not run
// yet are recorded cancelled and the cause is returned with the results.
func (r *runner) runCalls(ctx context.Context, plans []callPlan) ([]entry, error) {
	tcs := make([]*toolCtx, len(plans))
	prepErr := make([]error, len(plans))
	news := make([]NewItem, len(plans))
	for i, pl := range plans {
		c := pl.spec
		args := json.RawMessage(c.Args)
		if !json.Valid(args) {
			args, _ = json.Marshal(c.Args) // kept as the string it was
			prepErr[i] = fmt.Errorf("the arguments are not valid JSON: %q", capText(c.Args, 200))
		}
		p := &ToolPayload{Tool: c.Name, CallID: c.ID, Arguments: args, State: StateProposed, Step: pl.step, ReproposedFrom: pl.from}
		tc := &toolCtx{t: r.t, h: r.h, args: args, payload: p}
		tcs[i] = tc
		kind := KindToolCall
		def := tools[c.Name]
		switch {
		case def == nil:
			prepErr[i] = fmt.Errorf("there is no tool %q; the tools are %s", c.Name, strings.Join(toolOrder, ", "))
		default:
			kind = def.kind
			if prepErr[i] == nil {
				prepErr[i] = def.prepare(tc)
			}
		}
		if prepErr[i] == nil {
			p.Approval = policyFor(r.t, c.Name)
		}
		news[i] = NewItem{Kind: kind, Payload: *p}
	}
	ids, err := r.h.ProposeItems(ctx, news)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	results := make([]entry, len(plans))
	var stopped error
	for i, tc := range tcs {
		tc.itemID = ids[i]
		p := tc.payload
		res := r.runOne(ctx, tc, prepErr[i], &stopped)
		p.Result = capText(res.text, maxResultForModel)
		p.Error = res.err
		status := ItemCompleted
		if p.State != StateCompleted {
			status = ItemFailed
		}
		r.h.CompleteItem(tc.itemID, status, *p)
		if pl := plans[i]; pl.fromPayload != nil {
			old := *pl.fromPayload
			old.State, old.ReproposedAs = StateReproposed, tc.itemID
			r.h.CompleteItem(pl.from, ItemFailed, old)
		}
		results[i] = entry{kind: toolResultEntry, call: plans[i].spec, text: p.Result, isError: status != ItemCompleted, turn: r.t.TurnID}
	}
	return results, stopped
}

// runOne takes one proposed call through approval and its run, and sets
// its state; stopped records an interrupt (the calls after it are
// cancelled without running).
func (r *runner) runOne(ctx context.Context, tc *toolCtx, prepErr error, stopped *error) toolResult {
	p := tc.payload
	if *stopped == nil && ctx.Err() != nil {
		*stopped = context.Cause(ctx)
	}
	if *stopped != nil {
		p.State = StateCancelled
		return toolResult{text: cancelledResult, failed: true, err: "the turn was interrupted before it ran"}
	}
	if prepErr != nil {
		p.State = StateFailed
		return failed("%v", prepErr)
	}
	ok, err := r.approve(ctx, tc)
	if err != nil {
		*stopped = err
		if ctx.Err() != nil {
			*stopped = context.Cause(ctx)
		}
		p.State = StateCancelled
		return toolResult{text: cancelledResult, failed: true, err: "the turn ended while the call waited for approval"}
	}
	if !ok {
		p.State = StateDenied
		return toolResult{text: deniedResult, failed: true, err: "denied"}
	}
	// Durable before it starts: after a crash, running means "may have run".
	p.State = StateRunning
	if err := r.h.UpdateItem(ctx, tc.itemID, *p, StateDelta{State: StateRunning}); err != nil {
		*stopped = err
		if ctx.Err() != nil {
			*stopped = context.Cause(ctx)
		}
		p.State = StateCancelled
		return toolResult{text: cancelledResult, failed: true, err: "the call could not be recorded as running, so it did not run"}
	}
	res := tools[p.Tool].run(ctx, tc)
	switch {
	case ctx.Err() != nil:
		*stopped = context.Cause(ctx)
		p.State = StateCancelled
		if res.err == "" {
			res.err = "interrupted"
		}
		res.failed = true
	case res.failed:
		p.State = StateFailed
	default:
		p.State = StateCompleted
	}
	return res
}

// approve asks for a call's approval under its tool's policy.
func (r *runner) approve(ctx context.Context, tc *toolCtx) (bool, error) {
	p := tc.payload
	policy := p.Approval
	if policy == "none" {
		return true, nil
	}
	d := ApprovalDetails{Provider: "deepcode", Tool: p.Tool, CallID: p.CallID, ItemID: tc.itemID, Arguments: p.Arguments,
		Cwd: p.Cwd, Path: p.Path, Diff: p.Diff, Reproposed: p.ReproposedFrom != ""}
	kind, summary := "tool", p.Tool
	switch p.Tool {
	case "shell":
		kind, summary = "command", strings.Join(p.Command, " ")
		d.Command = summary
	case "write_file", "edit":
		kind, summary = "fileChange", fmt.Sprintf("%s %s (%s)", p.Tool, p.Path, p.Action)
	default:
		if p.Path != "" {
			summary += " " + p.Path
		}
	}
	if d.Reproposed {
		summary += " (proposed again: deepcode stopped before it ran)"
	}
	return r.h.Approve(ctx, policy, kind, summary, d)
}
