package api

import (
	"encoding/json"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// The wire types of agentd's methods (threads, turns, items, events,
// approvals, logical agents). Handlers and clients use these; nothing else
// declares them.

// Thread is the wire form of a thread. A logical agent (agents run) is a
// thread of kind "agent".
type Thread struct {
	ID           string    `json:"id"`
	Workspace    string    `json:"workspace"`
	Profile      string    `json:"profile"`
	Title        string    `json:"title"`
	Kind         string    `json:"kind"`
	Status       string    `json:"status"`
	HeadSequence int64     `json:"headSequence"`
	TurnCount    int       `json:"turnCount"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	// LastTurnStatus is the status of the latest turn ("" before the first).
	LastTurnStatus string `json:"lastTurnStatus,omitempty"`
	// Archived threads are left out of thread/list and thread/search.
	Archived bool `json:"archived,omitempty"`
}

// TurnError is why a turn did not complete.
type TurnError struct {
	Code      errs.Code `json:"code"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
	// Data holds the error's extra members, e.g. a failed command's
	// exitCode.
	Data map[string]any `json:"data,omitempty"`
}

// Turn is the wire form of a turn.
type Turn struct {
	ID         string     `json:"id"`
	ThreadID   string     `json:"threadId"`
	Ordinal    int        `json:"ordinal"`
	Status     string     `json:"status"`
	MessageID  string     `json:"messageId"`
	Profile    string     `json:"profile"`
	Model      string     `json:"model,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
	Error      *TurnError `json:"error,omitempty"`
	Response   string     `json:"response,omitempty"`
	CreatedAt  time.Time  `json:"createdAt"`
	StartedAt  *time.Time `json:"startedAt,omitempty"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
}

// Item is the wire form of an item. Its payload depends on its kind.
type Item struct {
	ID        string          `json:"id"`
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	Kind      string          `json:"kind"`
	Status    string          `json:"status"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// UserPayload is the payload of a user input item: the input receipt.
type UserPayload struct {
	Text           string `json:"text"`
	MessageID      string `json:"messageId"`
	Submission     string `json:"submission"`
	DeliveryState  string `json:"deliveryState,omitempty"`
	ExpectedTurnID string `json:"expectedTurnId,omitempty"`
}

// Event is one record of a thread's durable log, as replayed and notified
// (the params of thread.event).
type Event struct {
	ThreadID string          `json:"threadId"`
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	At       time.Time       `json:"at"`
	Payload  json.RawMessage `json:"payload"`
}

// Approval is the wire form of an approval request.
type Approval struct {
	ID        string          `json:"id"`
	ThreadID  string          `json:"threadId"`
	TurnID    string          `json:"turnId"`
	Revision  int             `json:"revision"`
	Status    string          `json:"status"`
	Kind      string          `json:"kind"`
	Summary   string          `json:"summary"`
	Details   json.RawMessage `json:"details"`
	DecidedBy string          `json:"decidedBy,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	DecidedAt *time.Time      `json:"decidedAt,omitempty"`
}

// Input is a user message.
type Input struct {
	Text string `json:"text"`
}

// ThreadStartParams are the parameters of thread/start.
type ThreadStartParams struct {
	Workspace string `json:"workspace"`
	Profile   string `json:"profile,omitempty"`
	Title     string `json:"title,omitempty"`
	// Trust is the explicit, recorded grant that --trust makes.
	Trust bool `json:"trust,omitempty"`
}

// ThreadResult answers thread/start.
type ThreadResult struct {
	Thread Thread `json:"thread"`
}

// PageParams ask for one page of a list.
type PageParams struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	// Archived lists the archived threads instead (thread/list only).
	Archived bool `json:"archived,omitempty"`
}

// ThreadListResult answers thread/list.
type ThreadListResult struct {
	Threads    []Thread `json:"threads"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// ThreadRef names a thread.
type ThreadRef struct {
	ThreadID string `json:"threadId"`
}

// ThreadReadResult answers thread/read.
type ThreadReadResult struct {
	Thread Thread `json:"thread"`
	Turns  []Turn `json:"turns"`
}

// TurnRef names a turn of a thread.
type TurnRef struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// TurnSubmitParams are the parameters of turn/start and turn/enqueue.
type TurnSubmitParams struct {
	ThreadID  string `json:"threadId"`
	MessageID string `json:"messageId"`
	Input     Input  `json:"input"`
	Profile   string `json:"profile,omitempty"`
	Model     string `json:"model,omitempty"`
	Reasoning string `json:"reasoning,omitempty"`
}

// TurnSubmitResult answers turn/start and turn/enqueue.
type TurnSubmitResult struct {
	Turn      Turn `json:"turn"`
	Item      Item `json:"item"`
	Duplicate bool `json:"duplicate,omitempty"`
}

// TurnSteerParams are the parameters of turn/steer.
type TurnSteerParams struct {
	ThreadID       string `json:"threadId"`
	ExpectedTurnID string `json:"expectedTurnId"`
	MessageID      string `json:"messageId"`
	Input          Input  `json:"input"`
}

// TurnSteerResult answers turn/steer.
type TurnSteerResult struct {
	TurnID        string `json:"turnId"`
	DeliveryState string `json:"deliveryState"`
	Duplicate     bool   `json:"duplicate,omitempty"`
}

// TurnResult answers turn/interrupt.
type TurnResult struct {
	Turn Turn `json:"turn"`
}

// TurnReadResult answers turn/read.
type TurnReadResult struct {
	Turn  Turn   `json:"turn"`
	Items []Item `json:"items"`
}

// TurnInputReadParams are the parameters of turn/input/read.
type TurnInputReadParams struct {
	ThreadID  string `json:"threadId"`
	MessageID string `json:"messageId"`
}

// TurnInputReadResult answers turn/input/read: the receipt's item, null
// when no input was recorded under the key.
type TurnInputReadResult struct {
	Item *Item `json:"item"`
}

// ReplayParams are the parameters of event/replay: after is exclusive,
// through inclusive.
type ReplayParams struct {
	ThreadID string `json:"threadId"`
	After    *int64 `json:"after"`
	Through  *int64 `json:"through,omitempty"`
	MaxBytes int    `json:"maxBytes,omitempty"`
}

// ReplayResult answers event/replay.
type ReplayResult struct {
	Events       []Event `json:"events"`
	NextAfter    int64   `json:"nextAfter"`
	HasMore      bool    `json:"hasMore"`
	HeadSequence int64   `json:"headSequence"`
}

// ApprovalListParams are the parameters of approval/list.
type ApprovalListParams struct {
	ThreadID string `json:"threadId,omitempty"`
}

// ApprovalListResult answers approval/list.
type ApprovalListResult struct {
	Approvals []Approval `json:"approvals"`
}

// RespondParams are the parameters of approval/respond.
type RespondParams struct {
	ApprovalID string `json:"approvalId"`
	Revision   int    `json:"revision"`
	Decision   string `json:"decision"`
}

// ApprovalResult answers approval/respond.
type ApprovalResult struct {
	Approval Approval `json:"approval"`
}

// AgentRunParams are the parameters of agent/run.
type AgentRunParams struct {
	Workspace string `json:"workspace"`
	Profile   string `json:"profile,omitempty"`
	Provider  string `json:"provider,omitempty"`
	Prompt    string `json:"prompt"`
	Trust     bool   `json:"trust,omitempty"`
}

// AgentContinueParams are the parameters of agent/continue.
type AgentContinueParams struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
}

// AgentRef names a logical agent.
type AgentRef struct {
	ID string `json:"id"`
}

// AgentReceipt answers agent/run and agent/continue.
type AgentReceipt struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// AgentView answers agent/show.
type AgentView struct {
	ID       string     `json:"id"`
	Status   string     `json:"status"`
	Response string     `json:"response,omitempty"`
	Error    *TurnError `json:"error,omitempty"`
	// ErrorCode and ErrorRetryable repeat error.code and error.retryable
	// at the top: a caller polling a background agent tells the recovery
	// category (cancelled, provider unavailable, workspace conflict, …)
	// from the record itself. Present exactly when error is.
	ErrorCode      errs.Code `json:"errorCode,omitempty"`
	ErrorRetryable *bool     `json:"errorRetryable,omitempty"`
}

// AgentSummary is one entry of agent/list.
type AgentSummary struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Profile string `json:"profile"`
	Title   string `json:"title"`
}

// AgentListResult answers agent/list.
type AgentListResult struct {
	Agents []AgentSummary `json:"agents"`
}

// TurnPayload is the payload of the turn events (turn.queued, …).
type TurnPayload struct {
	Turn Turn `json:"turn"`
}

// ItemPayload is the payload of the item events (item.completed, …).
type ItemPayload struct {
	Item Item `json:"item"`
}

// TurnSteeredPayload is the payload of turn.steered.
type TurnSteeredPayload struct {
	Item   Item   `json:"item"`
	TurnID string `json:"turnId"`
}

// Turn statuses.
const (
	TurnQueued          = "queued"
	TurnStarting        = "starting"
	TurnRunning         = "running"
	TurnWaitingApproval = "waitingApproval"
	TurnCompleted       = "completed"
	TurnFailed          = "failed"
	TurnInterrupted     = "interrupted"
)

// Event types of a thread's durable event log: the names of the events
// thread/events replays and agentd's subscribers receive.
const (
	EventTurnQueued       = "turn.queued"
	EventTurnStarted      = "turn.started"
	EventItemStarted      = "item.started"
	EventItemDelta        = "item.delta"
	EventItemCompleted    = "item.completed"
	EventTurnSteered      = "turn.steered"
	EventApprovalRequest  = "approval.requested"
	EventApprovalResolved = "approval.resolved"
	EventTurnCompleted    = "turn.completed"
	EventTurnFailed       = "turn.failed"
	EventTurnInterrupted  = "turn.interrupted"
)

// Item kinds every client renders, and item statuses.
const (
	KindUserMessage      = "userMessage"
	KindAgentMessage     = "agentMessage"
	KindCommandExecution = "commandExecution"
	KindFileChange       = "fileChange"
	// KindTokenUsage records a runtime turn's token usage.
	KindTokenUsage = "tokenUsage"

	ItemInProgress = "inProgress"
	ItemCompleted  = "completed"
	ItemFailed     = "failed"
)

// TurnStatuses are every turn status, in the order a turn goes through
// them (the schema's TurnStatus enum).
var TurnStatuses = []string{TurnQueued, TurnStarting, TurnRunning, TurnWaitingApproval, TurnCompleted, TurnFailed, TurnInterrupted}

// ThreadWorkspaceParams are the parameters of thread/workspace.
type ThreadWorkspaceParams struct {
	ThreadID string `json:"threadId"`
}

// ThreadWorkspaceResult answers thread/workspace.
type ThreadWorkspaceResult struct {
	ThreadID  string `json:"threadId"`
	Workspace string `json:"workspace"`
	Trusted   bool   `json:"trusted"`
}
