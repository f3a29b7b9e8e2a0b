package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// agentdClient calls agentd over a pool of connections to agentd.sock. A
// call borrows a connection for its duration; idle connections close after
// a while, so that the on-demand agentd can exit when it has nothing to do.
type agentdClient struct {
	pool *rpc.Pool
}

func newAgentdClient(sock string, log *slog.Logger) *agentdClient {
	return &agentdClient{pool: rpc.NewPool(rpc.PoolOptions{
		Service: "agentd",
		Dial:    rpc.DialOptions{Network: "unix", Address: sock, Path: "/rpc", Timeout: 30 * time.Second},
		Logger:  log,
	})}
}

// warm opens connections until n are idle, so that a burst of submissions
// that is about to fall due does not wait for connection set-up (nor, when
// agentd exited while idle, for its start on demand).
func (c *agentdClient) warm(ctx context.Context, n int) { c.pool.Warm(ctx, n) }

// call makes one request to agentd.
func (c *agentdClient) call(ctx context.Context, method string, params, out any) error {
	return c.pool.Call(ctx, method, params, out)
}

func (c *agentdClient) close() { c.pool.Close("scheduler stopping") }

// agentd's answers, as far as the scheduler reads them.
type threadInfo struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Profile   string `json:"profile"`
}

type turnInfo struct {
	ID string `json:"id"`
}

func (c *agentdClient) startThread(ctx context.Context, workspace, profile, title string, trust bool) (threadInfo, error) {
	var res struct {
		Thread threadInfo `json:"thread"`
	}
	err := c.call(ctx, api.MethodThreadStart, map[string]any{"workspace": workspace, "profile": profile, "title": title, "trust": trust}, &res)
	return res.Thread, err
}

// enqueue submits a run's turn with the run's key: agentd answers a
// repeated identical submission with the turn it created the first time.
func (c *agentdClient) enqueue(ctx context.Context, r *Run) (string, error) {
	var res struct {
		Turn turnInfo `json:"turn"`
	}
	err := c.call(ctx, api.MethodTurnEnqueue, map[string]any{
		"threadId":  r.ThreadID,
		"messageId": r.MessageID,
		"input":     map[string]string{"text": r.prompt},
		"profile":   r.profile,
	}, &res)
	return res.Turn.ID, err
}

// definitive reports whether agentd's refusal settles the run: the same
// request will never be accepted. Anything else (agentd down, busy,
// draining, another owner, a lost connection whose outcome is unknown) is
// retried with the same key, which cannot create a second turn.
func definitive(err error) bool {
	switch errs.CodeOf(err) {
	case errs.InvalidParams, errs.NotFound, errs.WorkspaceUntrusted, errs.DuplicateMessageConflict,
		errs.Conflict, errs.Forbidden, errs.MethodNotFound, errs.InvalidRequest, errs.RequestTooLarge:
		return true
	}
	return false
}
