package cli

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// ensureRunning converges on a ready instance like `service start`, without
// printing anything: a running instance is used as it is.
func (a *app) ensureRunning(ctx context.Context) error {
	if st, err := a.connectedStatus(ctx); err == nil && st.Ready && st.Phase == mgmt.PhaseRunning {
		return nil
	}
	a.quiet = true
	_, _, err := a.start(ctx, startOptions{})
	return err
}

// business starts the service if needed and opens an initialized business
// connection.
func (a *app) business(ctx context.Context) (*client.Business, error) {
	if err := a.ensureRunning(ctx); err != nil {
		return nil, err
	}
	return a.dialBusiness(ctx)
}

// dialBusiness opens a business connection to the running instance.
func (a *app) dialBusiness(ctx context.Context) (*client.Business, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return client.ConnectBusiness(ctx, a.layout, client.BusinessOptions{})
}

// call is business.Call, the name the CLI's commands know it by.
func call(ctx context.Context, b *client.Business, method string, params, result any) error {
	return business.Call(ctx, b, method, params, result)
}

// workspacePath is the --workspace flag made absolute (default: the
// current directory).
func workspacePath(p string) (string, error) {
	if p == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", errs.Wrap(err, errs.InvalidParams, "cannot determine the current directory: pass --workspace")
		}
		return wd, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidParams, "bad --workspace %q", p)
	}
	return abs, nil
}
