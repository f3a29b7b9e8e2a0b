package agentd

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// A logical agent is a thread of kind "agent"; its id is the thread id. The
// agent methods return only the id, status, profile, title, response and
// structured error: no workspace paths, provider session ids or timestamps.

// agentStatus maps a logical agent's latest turn to its status.
func agentStatus(t Turn, ok bool) string {
	if !ok {
		return "idle"
	}
	switch t.Status {
	case StatusFailed, StatusInterrupted:
		return "error"
	case StatusStarting:
		return StatusRunning
	}
	return t.Status
}

func (a *Agentd) agentMethods(mux *rpc.Mux) {
	mux.Handle(api.MethodAgentRun, rpc.Method(a.agentRun))
	mux.Handle(api.MethodAgentContinue, rpc.Method(func(ctx context.Context, p api.AgentContinueParams) (AgentReceipt, error) {
		release, err := a.agentStartLock(ctx)
		if err != nil {
			return AgentReceipt{}, err
		}
		defer release()
		th, err := a.agentThread(ctx, p.ID)
		if err != nil {
			return AgentReceipt{}, err
		}
		res, err := a.submit(ctx, SubmitEnqueue, TurnSubmitParams{ThreadID: th.ID, MessageID: newID("msg_"), Input: Input{Text: p.Prompt}})
		if err != nil {
			return AgentReceipt{}, err
		}
		return AgentReceipt{ID: th.ID, Status: agentStatus(res.Turn, true)}, nil
	}))
	mux.Handle(api.MethodAgentShow, rpc.Method(func(ctx context.Context, p api.AgentRef) (AgentView, error) {
		th, err := a.agentThread(ctx, p.ID)
		if err != nil {
			return AgentView{}, err
		}
		t, ok, err := latestTurn(ctx, a.e.q, th.ID)
		if err != nil {
			return AgentView{}, err
		}
		v := AgentView{ID: th.ID, Status: agentStatus(t, ok), Response: t.Response}
		if t.Error != nil && isTerminal(t.Status) && t.Status != StatusCompleted {
			v.Error = t.Error
			v.ErrorCode = t.Error.Code
			v.ErrorRetryable = &t.Error.Retryable
		}
		return v, nil
	}))
	mux.Handle(api.MethodAgentList, rpc.Method(func(ctx context.Context, _ api.Empty) (api.AgentListResult, error) {
		ths, _, err := listThreads(ctx, a.e.q, "agent", "", 1000)
		if err != nil {
			return api.AgentListResult{}, err
		}
		out := []AgentSummary{}
		for _, th := range ths {
			t, ok, err := latestTurn(ctx, a.e.q, th.ID)
			if err != nil {
				return api.AgentListResult{}, err
			}
			out = append(out, AgentSummary{ID: th.ID, Status: agentStatus(t, ok), Profile: th.Profile, Title: th.Title})
		}
		return api.AgentListResult{Agents: out}, nil
	}))
}

// agentStartLock serialises agent/run and agent/continue. agent/run checks
// the workspace when it creates the thread and again when it submits the
// first turn, in two transactions; without the lock another agent could
// start in between, and the refused run would leave an agent without turns.
func (a *Agentd) agentStartLock(ctx context.Context) (release func(), err error) {
	select {
	case a.agentStart <- struct{}{}:
		return func() { <-a.agentStart }, nil
	case <-ctx.Done():
		return nil, errs.Wrap(ctx.Err(), errs.DaemonTimeout, "another agent was being started; try again")
	}
}

// checkAgentWorkspace refuses to start a turn of the logical agent self
// ("" for one not created yet) in workspace ws while another logical
// agent's turn there has not finished (queued, running or waiting for
// approval): two agents writing the same folder would overwrite each
// other's changes. Not retryable: the other agent may run for hours, so the
// caller waits for it (the message names it) rather than retrying on a
// timer. Plain threads (thread/start) are not checked: a person watches
// those.
func checkAgentWorkspace(ctx context.Context, q querier, ws, self string) error {
	var holder string
	err := q.QueryRowContext(ctx, `SELECT t.thread_id FROM turns t INDEXED BY turns_active
		JOIN threads th ON th.id = t.thread_id
		WHERE t.`+activeStatus+` AND th.kind = 'agent' AND th.workspace = ? AND th.id <> ?
		ORDER BY t.created_at, t.id LIMIT 1`, ws, self).Scan(&holder)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return dbErr(err)
	}
	return errs.New(errs.WorkspaceConflict,
		"agent %s has not finished in this workspace: wait until it has (deepcode agents show %s), or use another workspace", holder, holder).
		With("agentId", holder)
}

// agentThread finds a logical agent by its exact id.
func (a *Agentd) agentThread(ctx context.Context, id string) (Thread, error) {
	if !validID("thr_", id) {
		return Thread{}, errs.New(errs.NotFound, "no agent %q (agent ids look like thr_…; provider session ids are not agent ids)", id)
	}
	th, err := getThread(ctx, a.e.q, id)
	if err != nil || th.Kind != "agent" {
		return Thread{}, errs.New(errs.NotFound, "no agent %q", id)
	}
	return th, nil
}

// profileForProvider picks the profile named like the provider, or the
// first (by name) configured with it.
func (a *Agentd) profileForProvider(provider string) (string, error) {
	if p, ok := a.cfg.Profile(provider); ok && p.Provider == provider {
		return provider, nil
	}
	var names []string
	for n, p := range a.cfg.Profiles {
		if p.Provider == provider {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", errs.New(errs.InvalidParams, "no profile uses provider %q", provider)
	}
	sort.Strings(names)
	return names[0], nil
}

func (a *Agentd) agentRun(ctx context.Context, p AgentRunParams) (AgentReceipt, error) {
	if err := checkText(p.Prompt); err != nil {
		return AgentReceipt{}, errs.New(errs.InvalidParams, "prompt must not be empty")
	}
	release, err := a.agentStartLock(ctx)
	if err != nil {
		return AgentReceipt{}, err
	}
	defer release()
	profile := p.Profile
	if profile == "" && p.Provider != "" {
		if profile, err = a.profileForProvider(p.Provider); err != nil {
			return AgentReceipt{}, err
		}
	}
	title := strings.TrimSpace(strings.SplitN(p.Prompt, "\n", 2)[0])
	if len(title) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(title[cut]) {
			cut--
		}
		title = title[:cut]
	}
	th, err := a.createThread(ctx, ThreadStartParams{Workspace: p.Workspace, Profile: profile, Title: title, Trust: p.Trust}, "agent")
	if err != nil {
		return AgentReceipt{}, err
	}
	res, err := a.submit(ctx, SubmitStart, TurnSubmitParams{ThreadID: th.ID, MessageID: newID("msg_"), Input: Input{Text: p.Prompt}})
	if err != nil {
		return AgentReceipt{}, err
	}
	return AgentReceipt{ID: th.ID, Status: agentStatus(res.Turn, true)}, nil
}
