package agentd

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Turn statuses.
const (
	StatusQueued          = "queued"
	StatusStarting        = "starting"
	StatusRunning         = "running"
	StatusWaitingApproval = "waitingApproval"
	StatusCompleted       = "completed"
	StatusFailed          = "failed"
	StatusInterrupted     = "interrupted"
)

func isTerminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusInterrupted
}

// Item kinds and statuses.
const (
	KindUserMessage      = "userMessage"
	KindAgentMessage     = "agentMessage"
	KindCommandExecution = "commandExecution"
	KindFileChange       = "fileChange"
	// KindTokenUsage records a runtime turn's token usage (UsagePayload).
	KindTokenUsage = "tokenUsage"

	ItemInProgress = "inProgress"
	ItemCompleted  = "completed"
	ItemFailed     = "failed"
)

// Submission kinds of user inputs.
const (
	SubmitStart   = "start"
	SubmitEnqueue = "enqueue"
	SubmitSteer   = "steer"
)

// Steer delivery states.
const (
	DeliveryPending  = "pending"
	DeliveryAccepted = "accepted"
	DeliveryUnknown  = "unknown"
)

// Event types of the per-thread durable log.
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

// Item is the wire form of an item.
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

// Event is one record of a thread's durable log, as replayed and notified.
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

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID makes an id with a type prefix: thr_, turn_, item_, appr_.
func newID(prefix string) string {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + idEncoding.EncodeToString(b)
}

// validID checks an id's prefix and shape. Ids are never resolved from a
// prefix: a malformed or foreign id (a provider session id) is NOT_FOUND.
func validID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 16 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
