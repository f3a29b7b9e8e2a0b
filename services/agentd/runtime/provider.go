// Package runtime is what agentd's agent runtimes share: the Provider
// interface a runtime implements, the TurnRun it is given, the Sink it
// reports through, the pool of warm runtime processes and the helpers that
// start and stop them. Each provider is a package of its own below it
// (runtime/codex, runtime/claude, …); agentd maps a profile to one and
// implements the Sink over its journal, so nothing here imports agentd.
package runtime

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/deepcode-dev/deepcode/shared/config"
)

// Provider runs turns for one kind of agent runtime. Provider session ids
// and the logical records are durable; the runtime behind a Provider is
// disposable and recreated after a restart.
type Provider interface {
	// Run executes one turn until it ends. It reports output through
	// t.Sink and returns nil when the turn completed, or why it did not.
	// When ctx is cancelled (interrupt, shutdown) it stops the runtime and
	// returns promptly.
	Run(ctx context.Context, t *TurnRun) error
	// CanSteer reports whether a running turn accepts more input.
	CanSteer() bool
}

// InterruptGrace is how long an interrupted turn of a runtime (codex's
// turn/interrupt, claude's interrupt request, opencode's abort) may take
// to end before the runtime is killed.
var InterruptGrace = 10 * time.Second

// TurnRun is one turn as a provider sees it.
type TurnRun struct {
	ThreadID    string
	TurnID      string
	Workspace   string
	Prompt      string
	ProfileName string
	Profile     config.Profile
	Model       string
	Reasoning   string
	// SessionID is the thread's durable provider session, "" at first.
	SessionID string
	Sink      Sink
	// Steer delivers inputs accepted into this turn's mailbox.
	Steer <-chan string

	// Pool keeps the warm runtimes of the runtime providers.
	Pool *Pool
}

// NewFileAction is what a tool that creates or replaces a whole file
// (claude's Write, opencode's write) does to path, in the words codex uses
// for its patches: "add" unless the file is already there. It is asked
// before the tool runs.
func NewFileAction(path, workspace string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(workspace, path)
	}
	if _, err := os.Stat(path); err == nil {
		return "update"
	}
	return "add"
}
