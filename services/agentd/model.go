package agentd

import (
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/ids"
	"time"
)

// Turn statuses.
const (
	StatusQueued          = api.TurnQueued
	StatusStarting        = api.TurnStarting
	StatusRunning         = api.TurnRunning
	StatusWaitingApproval = api.TurnWaitingApproval
	StatusCompleted       = api.TurnCompleted
	StatusFailed          = api.TurnFailed
	StatusInterrupted     = api.TurnInterrupted
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

// newID makes an id with a type prefix: thr_, turn_, item_, appr_.
func newID(prefix string) string { return ids.New(prefix) }

// validID checks an id's prefix and shape. Ids are never resolved from a
// prefix: a malformed or foreign id (a provider session id) is NOT_FOUND.
func validID(prefix, id string) bool { return ids.Valid(prefix, id) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
