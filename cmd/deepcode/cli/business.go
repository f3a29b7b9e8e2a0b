package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// callTimeout bounds one business call: a guard against a hung service,
// generous because the first call may start agentd on demand.
const callTimeout = 2 * time.Minute

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

// call is one business call bounded by callTimeout.
func call(ctx context.Context, b *client.Business, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return b.Call(ctx, method, params, result)
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

// newMessageID is a fresh key for a keyed submission (turn/start): kept
// for retries of the same request, never reused for another.
func newMessageID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return "msg_" + hex.EncodeToString(b)
}

// connectionError reports errors after which the connection (or the
// service behind it) may come back: reconnect and continue from durable
// state.
func connectionError(err error) bool {
	switch errs.CodeOf(err) {
	case errs.ConnectionLost, errs.ServiceUnavailable, errs.ServiceNotRunning, errs.DaemonTimeout,
		errs.InstanceReplaced, errs.IdentityMismatch, errs.Overloaded:
		return true
	}
	return false
}

// Wire types of the business methods the CLI uses. They mirror agentd's and
// keep only what the CLI shows, so that nothing else reaches its output.

type wireError struct {
	Code      errs.Code      `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	ExitCode  *int           `json:"exitCode,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
}

func (w *wireError) err() *errs.Error {
	return &errs.Error{Code: w.Code, Message: w.Message, Retryable: w.Retryable}
}

// exitCode is the command's exit status a TASK_FAILED error carries, if any.
func (w *wireError) exitCode() (int, bool) {
	if w.ExitCode != nil {
		return *w.ExitCode, true
	}
	if v, ok := w.Data["exitCode"].(float64); ok {
		return int(v), true
	}
	return 0, false
}

type wireThread struct {
	ID string `json:"id"`
}

type wireTurn struct {
	ID       string     `json:"id"`
	ThreadID string     `json:"threadId"`
	Status   string     `json:"status"`
	Error    *wireError `json:"error,omitempty"`
	// Response is the turn's latest response text (its last agent message,
	// the tail of a command's output).
	Response string `json:"response,omitempty"`
}

type wireItem struct {
	ID      string          `json:"id"`
	TurnID  string          `json:"turnId"`
	Kind    string          `json:"kind"`
	Status  string          `json:"status"`
	Payload json.RawMessage `json:"payload"`
}

type wireApproval struct {
	ID       string `json:"id"`
	TurnID   string `json:"turnId"`
	Revision int    `json:"revision"`
	Status   string `json:"status"`
	Kind     string `json:"kind"`
	Summary  string `json:"summary"`
}

type replayResult struct {
	Events       []client.Event `json:"events"`
	NextAfter    int64          `json:"nextAfter"`
	HasMore      bool           `json:"hasMore"`
	HeadSequence *int64         `json:"headSequence"`
}

type replayParams struct {
	ThreadID string `json:"threadId"`
	After    int64  `json:"after"`
	Through  *int64 `json:"through,omitempty"`
}

type turnRef struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// startThread starts a thread in workspace ws titled after the task, on a
// profile if one is named, recording the --trust grant if given.
func startThread(ctx context.Context, b *client.Business, ws, task, profile string, trust bool) (wireThread, error) {
	var th struct {
		Thread wireThread `json:"thread"`
	}
	params := map[string]any{"workspace": ws, "title": titleOf(task)}
	if profile != "" {
		params["profile"] = profile
	}
	if trust {
		params["trust"] = true
	}
	err := call(ctx, b, api.MethodThreadStart, params, &th)
	return th.Thread, err
}
