// Package native is deepcode's own agent runtime: it speaks a model API
// itself (OpenAI Responses, OpenAI-compatible Chat Completions, Anthropic
// Messages, through the vendors' SDKs), runs its tools in agentd's process
// (shell, read_file, write_file, edit, list, glob, grep), and keeps the
// conversation as the thread's own durable items, so no agent CLI and no
// Node.js is needed.
//
// What a CLI-based provider cannot promise, this one does: every tool call
// is journaled before it runs (proposed → approval → running →
// completed/failed), so after a crash agentd knows which calls never
// started (re-proposed at the thread's next turn), which may have run
// (unknown: never run again, and the model is told so) and which finished
// (never repeated).
//
// The package depends on agentd only through Host, which agentd's adapter
// implements over its journal, approvals and items.
package native

import (
	"context"
	"encoding/json"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/config"
)

// Item kinds the runtime records. The first four are agentd's own kinds,
// which every client renders; the others are the runtime's.
const (
	KindUserMessage      = api.KindUserMessage
	KindAgentMessage     = api.KindAgentMessage
	KindCommandExecution = api.KindCommandExecution
	KindFileChange       = api.KindFileChange
	// KindToolCall is a call of a tool that neither runs a command nor
	// changes a file (read_file, list, glob, grep).
	KindToolCall = "toolCall"
	// KindReasoning is a reasoning summary the model streamed.
	KindReasoning = "reasoning"
	// KindContextTrimmed records that older turns were left out of the
	// model's context to fit the profile's context budget.
	KindContextTrimmed = "contextTrimmed"
)

// Item statuses (agentd's).
const (
	ItemInProgress = api.ItemInProgress
	ItemCompleted  = api.ItemCompleted
	ItemFailed     = api.ItemFailed
)

// Tool call states, in ToolPayload.State. A call is journaled proposed
// before anything else happens to it and running before it starts.
const (
	StateProposed  = "proposed"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateDenied    = "denied"
	// StateCancelled: the turn was interrupted before or while it ran
	// (Output holds what it produced).
	StateCancelled = "cancelled"
	// StateUnknown: agentd stopped while it ran; whether it finished is
	// unknown, and it is never run again.
	StateUnknown = "unknown"
	// StateNotRun: agentd stopped before it ran; the thread's next turn
	// proposes it again.
	StateNotRun = "notRun"
	// StateReproposed: a notRun call that a later turn proposed again (the
	// new item carries its outcome).
	StateReproposed = "reproposed"
)

// Turn is one turn as the runtime sees it.
type Turn struct {
	ThreadID    string
	TurnID      string
	Workspace   string
	ProfileName string
	Profile     config.Profile
	// Model and Reasoning are the turn's own choice, else the profile's.
	Model     string
	Reasoning string
	// APIKey is the model API's credential ("" for servers that need none).
	APIKey string
	// ToolEnv is the environment of the shell tool's processes.
	ToolEnv []string
	// TempDir is the temporary folder the shell tool's processes get
	// (TMPDIR) and may write in under the sandbox; "" is os.TempDir().
	TempDir string
	// Steer delivers inputs accepted into the running turn: each is given
	// to the model with its next request.
	Steer <-chan string
}

// Host is what the runtime needs from agentd: the turn's durable record,
// approvals, and the thread's history.
type Host interface {
	// StartItem records a new item of the turn and returns its id; Delta
	// records incremental output of an item and CompleteItem its end.
	// They are applied in call order and do not wait for the commit.
	StartItem(kind string, payload any) string
	Delta(itemID string, delta any)
	CompleteItem(itemID, status string, payload any)
	// SaveBlob keeps data whole as the item's blob name (a shell call's
	// output), in call order with the item's other records, without
	// waiting for the commit.
	SaveBlob(itemID, name string, data []byte)
	// Response records the turn's latest response; Usage its token usage.
	Response(text string)
	Usage(u Usage)

	// ProposeItems records new in-progress items in one transaction and
	// returns their ids once it committed: a tool call is durable before
	// anything is done about it.
	ProposeItems(ctx context.Context, items []NewItem) ([]string, error)
	// UpdateItem records an item's new payload and publishes delta as an
	// item.delta event, and returns once that committed.
	UpdateItem(ctx context.Context, itemID string, payload any, delta any) error
	// Approve asks for approval under policy ("ask" waits for a client,
	// "auto" approves, "never" denies; each decision is recorded).
	Approve(ctx context.Context, policy, kind, summary string, details any) (bool, error)
	// History returns the thread's items, oldest first, through this
	// turn's input.
	History(ctx context.Context) ([]Item, error)
}

// NewItem is an item to propose.
type NewItem struct {
	Kind    string
	Payload any
}

// Item is a durable item of the thread.
type Item struct {
	ID      string
	TurnID  string
	Kind    string
	Status  string
	Payload json.RawMessage
}

// Usage is the token usage of a turn's model requests.
type Usage struct {
	InputTokens       int64
	CachedInputTokens int64
	OutputTokens      int64
	ReasoningTokens   int64
	TotalTokens       int64
}

func (u *Usage) add(o Usage) {
	u.InputTokens += o.InputTokens
	u.CachedInputTokens += o.CachedInputTokens
	u.OutputTokens += o.OutputTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.TotalTokens += o.TotalTokens
}

// MessagePayload is an agent message's payload (agentd's shape, plus the
// model request it answered).
type MessagePayload struct {
	Text string `json:"text"`
	// Step is the turn's model request that produced it, from 1.
	Step int `json:"step,omitempty"`
}

// TextDelta is an agent message's or a reasoning summary's delta.
type TextDelta struct {
	Text string `json:"text"`
}

// OutputDelta is a shell call's output delta (agentd's shape).
type OutputDelta struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// StateDelta is the delta of a tool call whose state changed.
type StateDelta struct {
	State string `json:"state"`
}

// ReasoningPayload is a reasoning summary item's payload.
type ReasoningPayload struct {
	Text string `json:"text"`
	Step int    `json:"step,omitempty"`
}

// TrimPayload is a contextTrimmed item's payload: what the model did not
// get of the conversation.
type TrimPayload struct {
	// Budget is the context budget in (estimated) tokens.
	Budget int `json:"budget"`
	// DroppedTurns and DroppedItems are the older turns and items left out.
	DroppedTurns int `json:"droppedTurns"`
	DroppedItems int `json:"droppedItems"`
	// KeptTokens is the estimate of what was sent.
	KeptTokens int `json:"keptTokens"`
}

// ToolPayload is the payload of a tool call item (commandExecution for
// shell, fileChange for write_file and edit, toolCall for the others). The
// first fields are every call's; the others belong to some tools, in the
// names agentd's own command and file change payloads use.
type ToolPayload struct {
	Tool      string          `json:"tool"`
	CallID    string          `json:"callId"`
	Arguments json.RawMessage `json:"arguments"`
	State     string          `json:"state"`
	// Step is the turn's model request that asked for the call, from 1.
	Step int `json:"step,omitempty"`
	// Approval is how the call was allowed or refused: "ask" (a client
	// answered), "auto", "never", or "none" (the tool needs no approval).
	Approval string `json:"approval,omitempty"`
	// Result is what the model was told of the outcome.
	Result string `json:"result,omitempty"`
	// Error says why the call failed.
	Error string `json:"error,omitempty"`
	// ReproposedFrom is the item of an earlier turn whose call this one
	// proposes again (it never ran: agentd stopped first).
	ReproposedFrom string `json:"reproposedFrom,omitempty"`
	// ReproposedAs is the item that proposed this call again.
	ReproposedAs string `json:"reproposedAs,omitempty"`

	// shell (agentd's command execution fields)
	Command     []string `json:"command,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	ExitCode    *int     `json:"exitCode,omitempty"`
	Output      string   `json:"output,omitempty"`
	OutputBytes int64    `json:"outputBytes,omitempty"`
	// Blob names the item's blob holding the whole output.
	Blob    string `json:"blob,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`

	// write_file and edit (agentd's file change fields)
	Path   string `json:"path,omitempty"`
	Action string `json:"action,omitempty"`
	Bytes  int    `json:"bytes,omitempty"`
	// Diff is the change as a unified diff (before → after).
	Diff          string `json:"diff,omitempty"`
	DiffTruncated bool   `json:"diffTruncated,omitempty"`
}

// Blob names.
const (
	BlobOutput = "output" // a shell call's whole output
	BlobBefore = "before" // a changed file before the change
	BlobAfter  = "after"  // and after it
)

// Limits of a turn.
const (
	// maxSteps bounds the model requests of one turn.
	maxSteps = 100
	// defaultContextBudget is the context budget of a profile that sets none.
	defaultContextBudget = 100_000
	// defaultMaxOutput bounds one model answer when the profile does not.
	defaultMaxOutput = 8192
	// defaultToolTimeout bounds a shell call when the profile does not.
	defaultToolTimeout = 10 * time.Minute
)
