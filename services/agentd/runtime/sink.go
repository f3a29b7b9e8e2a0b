package runtime

import "context"

// Sink is how a provider reports a turn's progress. agentd's implements it
// over the journal: every call becomes a durable journal op, in call
// order; output calls do not wait for the commit, so a fast runtime is
// slowed only by the journal's bounded queue.
type Sink interface {
	// StartItem records a new item and returns its id.
	StartItem(kind string, payload any) string
	// Delta records incremental output of an item.
	Delta(itemID string, delta any)
	// CompleteItem records an item's final status and payload.
	CompleteItem(itemID, status string, payload any)
	// Response records the turn's latest response (agents show).
	Response(text string)
	// Usage records the turn's token usage as a completed tokenUsage item.
	Usage(u UsagePayload)
	// SetSession records the runtime's session id, durably, so a later
	// turn or a restarted agentd resumes it.
	SetSession(id string)
	// Approve asks for approval and waits for the decision. The profile's
	// policy may decide at once ("never" denies, "auto" approves);
	// otherwise the request is durable and visible to every client until
	// one answers with approval/respond, or the turn ends.
	Approve(ctx context.Context, kind, summary string, details any) (bool, error)
}
