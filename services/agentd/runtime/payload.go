package runtime

// The payloads and deltas of the items more than one provider reports.
// Their JSON is the wire form clients read (item kinds and statuses are
// in shared/api).

// MessagePayload is an agent message item's payload.
type MessagePayload struct {
	Text string `json:"text"`
}

// TextDelta is an agent message item's delta.
type TextDelta struct {
	Text string `json:"text"`
}

// CommandPayload is a command execution item's payload.
type CommandPayload struct {
	Command     []string `json:"command"`
	Cwd         string   `json:"cwd"`
	ExitCode    *int     `json:"exitCode,omitempty"`
	Output      string   `json:"output,omitempty"`
	OutputBytes int64    `json:"outputBytes,omitempty"`
}

// OutputTail bounds the output a command execution item's final payload
// keeps; the whole output is in the item's delta events.
const OutputTail = 64 << 10

// OutputDelta is a command execution item's delta.
type OutputDelta struct {
	Stream string `json:"stream"`
	Text   string `json:"text"`
}

// FileChangesPayload is the payload of a file change item with several
// files (codex, claude, opencode).
type FileChangesPayload struct {
	Changes []FileChange `json:"changes"`
}

// FileChange is one file of a change.
type FileChange struct {
	Path   string `json:"path"`
	Action string `json:"action"`
}

// UsagePayload is a token usage item's payload: what the turn's model
// requests consumed.
type UsagePayload struct {
	InputTokens       int64 `json:"inputTokens"`
	CachedInputTokens int64 `json:"cachedInputTokens,omitempty"`
	OutputTokens      int64 `json:"outputTokens"`
	ReasoningTokens   int64 `json:"reasoningTokens,omitempty"`
	TotalTokens       int64 `json:"totalTokens"`
}
