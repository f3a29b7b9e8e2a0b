// Package business is what the deepcode CLI and its terminal UI
// (deepcode-tui) share of the business protocol: the wire types they show,
// the event names, the contiguous event cursor, bounded calls and the
// classification of failures worth a reconnect. It is plain code over
// shared/client, so that the TUI, which lives in its own binary (its
// terminal packages cost every CLI command their start-up), and the CLI's
// followers (exec, threads attach) read a thread's log the same way.
package business

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// CallTimeout bounds one business call: a guard against a hung service,
// generous because the first call may start agentd on demand.
const CallTimeout = 2 * time.Minute

// The backoff between attempts to connect again.
const (
	MinReconnectDelay = 100 * time.Millisecond
	ReconnectMaxDelay = 3 * time.Second
)

// Call is one business call bounded by CallTimeout.
func Call(ctx context.Context, b *client.Business, method string, params, result any) error {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return b.Call(ctx, method, params, result)
}

// NewMessageID is a fresh key for a keyed submission (turn/start): kept
// for retries of the same request, never reused for another.
func NewMessageID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return "msg_" + hex.EncodeToString(b)
}

// ConnectionError reports errors after which the connection (or the
// service behind it) may come back: reconnect and continue from durable
// state.
func ConnectionError(err error) bool {
	switch errs.CodeOf(err) {
	case errs.ConnectionLost, errs.ServiceUnavailable, errs.ServiceNotRunning, errs.DaemonTimeout,
		errs.InstanceReplaced, errs.IdentityMismatch, errs.Overloaded:
		return true
	}
	return false
}

// Retryable reports failures worth another connection: the connection or
// the service behind it may come back. A protocol or credential mismatch
// will not.
func Retryable(err error) bool {
	if ConnectionError(err) {
		return true
	}
	switch errs.CodeOf(err) {
	case errs.StartTimeout, errs.LeaseHeld:
		return true
	}
	return false
}

// TitleOf is a thread title: the task's first line, shortened.
func TitleOf(task string) string {
	title := strings.TrimSpace(strings.SplitN(strings.TrimSpace(task), "\n", 2)[0])
	if len(title) > 80 {
		cut := 80
		for cut > 0 && !utf8.RuneStart(title[cut]) {
			cut--
		}
		title = title[:cut]
	}
	return title
}

// StartThread starts a thread in workspace ws titled after the task, on a
// profile if one is named, recording the --trust grant if given.
func StartThread(ctx context.Context, b *client.Business, ws, task, profile string, trust bool) (Thread, error) {
	var th struct {
		Thread Thread `json:"thread"`
	}
	params := map[string]any{"workspace": ws, "title": TitleOf(task)}
	if profile != "" {
		params["profile"] = profile
	}
	if trust {
		params["trust"] = true
	}
	err := Call(ctx, b, api.MethodThreadStart, params, &th)
	return th.Thread, err
}
