package api

// The wire types of termhost's methods and notifications (terminals of a
// thread).

// TerminalCreateParams are the parameters of terminal/create. Without
// Command the user's login shell runs.
type TerminalCreateParams struct {
	ThreadID string            `json:"threadId"`
	Command  []string          `json:"command,omitempty"`
	Cols     int               `json:"cols"`
	Rows     int               `json:"rows"`
	Env      map[string]string `json:"env,omitempty"`
}

// TerminalCreateResult answers terminal/create.
type TerminalCreateResult struct {
	TerminalID string `json:"terminalId"`
}

// TerminalRef names a terminal of a thread.
type TerminalRef struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
}

// TerminalInputParams are the parameters of terminal/input.
type TerminalInputParams struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
	Data       string `json:"data"`
}

// TerminalResizeParams are the parameters of terminal/resize.
type TerminalResizeParams struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
	Cols       int    `json:"cols"`
	Rows       int    `json:"rows"`
}

// TerminalReadParams are the parameters of terminal/read.
type TerminalReadParams struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
	// Offset is where to start (default 0).
	Offset *int64 `json:"offset,omitempty"`
	// Limit is the most bytes returned (default 16 KiB, 4 KiB to 64 KiB).
	Limit *int64 `json:"limit,omitempty"`
	// Through is an exclusive end (a headOffset captured earlier).
	Through *int64 `json:"through,omitempty"`
}

// TerminalListParams are the parameters of terminal/list.
type TerminalListParams struct {
	ThreadID string `json:"threadId"`
}

// TerminalInfo describes a terminal (terminal/list, terminal/close).
type TerminalInfo struct {
	TerminalID string   `json:"terminalId"`
	Command    []string `json:"command"`
	// Cols and Rows are the terminal's size (terminal/create, then the
	// last terminal/resize).
	Cols       int   `json:"cols"`
	Rows       int   `json:"rows"`
	Exited     bool  `json:"exited"`
	ExitCode   *int  `json:"exitCode,omitempty"`
	HeadOffset int64 `json:"headOffset"`
}

// TerminalListResult answers terminal/list.
type TerminalListResult struct {
	Terminals []TerminalInfo `json:"terminals"`
}

// TerminalOutputNotification is the params of terminal.output.
type TerminalOutputNotification struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
	Data       string `json:"data"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"nextOffset"`
}

// TerminalExitNotification is the params of terminal.exit.
type TerminalExitNotification struct {
	ThreadID   string `json:"threadId"`
	TerminalID string `json:"terminalId"`
	ExitCode   int    `json:"exitCode"`
	NextOffset int64  `json:"nextOffset"`
}
