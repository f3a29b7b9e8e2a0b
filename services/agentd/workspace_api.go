package agentd

import (
	"context"
	"database/sql"
	"errors"

	"github.com/deepcode-dev/deepcode/shared/api"
)

// threadWorkspace answers thread/workspace: the thread's workspace and
// whether the user trusted it. termhost asks this before opening a
// terminal, so that only agentd reads its own tables.
func (a *Agentd) threadWorkspace(ctx context.Context, p api.ThreadWorkspaceParams) (api.ThreadWorkspaceResult, error) {
	th, err := getThread(ctx, a.e.q, p.ThreadID)
	if err != nil {
		return api.ThreadWorkspaceResult{}, err
	}
	var trusted int
	err = a.e.q.QueryRowContext(ctx, `SELECT trusted FROM workspaces WHERE path = ?`, th.Workspace).Scan(&trusted)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return api.ThreadWorkspaceResult{}, dbErr(err)
	}
	return api.ThreadWorkspaceResult{ThreadID: th.ID, Workspace: th.Workspace, Trusted: trusted == 1}, nil
}
