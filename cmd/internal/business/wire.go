package business

import (
	"encoding/json"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Wire types of the business methods the CLI uses. They mirror agentd's and
// keep only what the CLI shows, so that nothing else reaches its output.

// Error is a turn's or a run's error as the service records it.
type Error struct {
	Code      errs.Code      `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	ExitCode  *int           `json:"exitCode,omitempty"`
	Data      map[string]any `json:"data,omitempty"`
}

// Err is w as an error of the CLI's own.
func (w *Error) Err() *errs.Error {
	return &errs.Error{Code: w.Code, Message: w.Message, Retryable: w.Retryable}
}

// Exit is the command's exit status a TASK_FAILED error carries, if any.
func (w *Error) Exit() (int, bool) {
	if w.ExitCode != nil {
		return *w.ExitCode, true
	}
	if v, ok := w.Data["exitCode"].(float64); ok {
		return int(v), true
	}
	return 0, false
}

type Thread struct {
	ID string `json:"id"`
}

type Turn struct {
	ID       string `json:"id"`
	ThreadID string `json:"threadId"`
	Status   string `json:"status"`
	Error    *Error `json:"error,omitempty"`
	// Response is the turn's latest response text (its last agent message,
	// the tail of a command's output).
	Response string `json:"response,omitempty"`
}

type Item struct {
	ID      string          `json:"id"`
	TurnID  string          `json:"turnId"`
	Kind    string          `json:"kind"`
	Status  string          `json:"status"`
	Payload json.RawMessage `json:"payload"`
}

type Approval struct {
	ID       string `json:"id"`
	TurnID   string `json:"turnId"`
	Revision int    `json:"revision"`
	Status   string `json:"status"`
	Kind     string `json:"kind"`
	Summary  string `json:"summary"`
}

type ReplayResult struct {
	Events       []client.Event `json:"events"`
	NextAfter    int64          `json:"nextAfter"`
	HasMore      bool           `json:"hasMore"`
	HeadSequence *int64         `json:"headSequence"`
}

type ReplayParams struct {
	ThreadID string `json:"threadId"`
	After    int64  `json:"after"`
	Through  *int64 `json:"through,omitempty"`
}

type TurnRef struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}
