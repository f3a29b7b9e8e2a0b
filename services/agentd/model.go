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

// Item kinds and statuses (the contract's).
const (
	KindUserMessage      = api.KindUserMessage
	KindAgentMessage     = api.KindAgentMessage
	KindCommandExecution = api.KindCommandExecution
	KindFileChange       = api.KindFileChange
	KindTokenUsage       = api.KindTokenUsage

	ItemInProgress = api.ItemInProgress
	ItemCompleted  = api.ItemCompleted
	ItemFailed     = api.ItemFailed
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

// Event types of the per-thread durable log (the contract's).
const (
	EventTurnQueued       = api.EventTurnQueued
	EventTurnStarted      = api.EventTurnStarted
	EventItemStarted      = api.EventItemStarted
	EventItemDelta        = api.EventItemDelta
	EventItemCompleted    = api.EventItemCompleted
	EventTurnSteered      = api.EventTurnSteered
	EventApprovalRequest  = api.EventApprovalRequest
	EventApprovalResolved = api.EventApprovalResolved
	EventTurnCompleted    = api.EventTurnCompleted
	EventTurnFailed       = api.EventTurnFailed
	EventTurnInterrupted  = api.EventTurnInterrupted
)

// newID makes an id with a type prefix: thr_, turn_, item_, appr_.
func newID(prefix string) string { return ids.New(prefix) }

// validID checks an id's prefix and shape. Ids are never resolved from a
// prefix: a malformed or foreign id (a provider session id) is NOT_FOUND.
func validID(prefix, id string) bool { return ids.Valid(prefix, id) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }
