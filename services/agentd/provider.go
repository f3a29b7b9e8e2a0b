package agentd

import (
	"context"
	"os"
	"path/filepath"

	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
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
	Sink      *Sink
	// Steer delivers inputs accepted into this turn's mailbox.
	Steer <-chan string

	// pool keeps the warm runtimes of the runtime providers.
	pool *runtimePool
}

// providerFor returns the provider of a profile.
func providerFor(p config.Profile) (Provider, error) {
	switch p.Provider {
	case "exec":
		return execProvider{}, nil
	case "script":
		return scriptProvider{}, nil
	case "codex":
		return codexProvider{}, nil
	case "claude":
		return claudeProvider{}, nil
	case "opencode":
		return opencodeProvider{}, nil
	case "deepcode":
		return nativeProvider{}, nil
	}
	return nil, errs.New(errs.ProviderUnavailable, "provider %q is not available in this build", p.Provider)
}

// newFileAction is what a tool that creates or replaces a whole file
// (claude's Write, opencode's write) does to path, in the words codex uses
// for its patches: "add" unless the file is already there. It is asked
// before the tool runs.
func newFileAction(path, workspace string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join(workspace, path)
	}
	if _, err := os.Stat(path); err == nil {
		return "update"
	}
	return "add"
}
