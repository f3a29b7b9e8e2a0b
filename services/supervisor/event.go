package supervisor

import "github.com/deepcode-dev/deepcode/shared/errs"

// StartupEvent is the one JSON line written on --status-fd: the launcher
// learns the outcome of the start without parsing logs.
type StartupEvent struct {
	Event      string     `json:"event"` // "started" or "failed"
	InstanceID string     `json:"instanceId,omitempty"`
	PID        int        `json:"pid,omitempty"`
	Port       int        `json:"port,omitempty"`
	Error      *errs.Wire `json:"error,omitempty"`
}
