// Package mgmt holds the management protocol's names and wire types, shared
// by the manager that serves them and the clients that call them.
package mgmt

import (
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Activity is what keeps a service busy. Drain waits for it to reach zero;
// on-demand services exit when it has been zero for their idle timeout.
type Activity struct {
	Turns     int `json:"turns"`
	Terminals int `json:"terminals"`
	Handlers  int `json:"handlers"`
	Runtimes  int `json:"runtimes"`
	// Queued counts admitted work that has not started (queued turns). A
	// drain does not wait for it (a paused service does not start it), but
	// an on-demand service with queued work must not exit when idle.
	Queued int `json:"queued"`
}

// Add sums two activities.
func (a Activity) Add(b Activity) Activity {
	return Activity{a.Turns + b.Turns, a.Terminals + b.Terminals, a.Handlers + b.Handlers, a.Runtimes + b.Runtimes, a.Queued + b.Queued}
}

// Busy reports work in progress: what a drain waits for.
func (a Activity) Busy() bool { return a.Turns+a.Terminals+a.Handlers+a.Runtimes > 0 }

// Idle reports nothing in progress and nothing waiting to start.
func (a Activity) Idle() bool { return !a.Busy() && a.Queued == 0 }

// StartupEvent is the one JSON line deepcode-supervisor writes on
// --status-fd: the launcher learns the outcome of the start without parsing
// logs.
type StartupEvent struct {
	Event      string     `json:"event"` // "started" or "failed"
	InstanceID string     `json:"instanceId,omitempty"`
	PID        int        `json:"pid,omitempty"`
	Port       int        `json:"port,omitempty"`
	Error      *errs.Wire `json:"error,omitempty"`
}

// Routes.
const (
	RouteLive     = "/health/live"
	RouteReady    = "/health/ready"
	RouteIdentity = "/control/identity"
	RouteRPC      = "/control/rpc"
)

// Methods of POST /control/rpc.
const (
	MethodStatus = "status"
	MethodStop   = "stop"
	MethodDrain  = "supervisor/drain"
	MethodResume = "supervisor/resume"
	MethodIssue  = "auth/issue"
)

// Phases of an instance. "stopped" and "starting" are only ever reported
// by clients: "starting" is an instance whose root process holds
// instance.lock but whose manager does not answer yet.
const (
	PhaseStarting = "starting"
	PhaseRunning  = "running"
	PhaseDraining = "draining"
	PhaseStopping = "stopping"
	PhaseStopped  = "stopped"
)

// IdentityResult answers GET /control/identity?challenge=<64 hex>.
type IdentityResult struct {
	InstanceID      string `json:"instanceId"`
	Proof           string `json:"proof"`
	ProtocolVersion string `json:"protocolVersion"`
}

// ServiceState is one service in status. State is "running", "draining",
// "stopping" (its graceful stop runs; it exits at the end), "idle"
// (on-demand, not started), "down", or while the service runs but refuses
// writes the State of its NotReady ("standby", "degraded"), with Code and
// Reason saying why.
type ServiceState struct {
	State    string    `json:"state"`
	PID      int       `json:"pid,omitempty"`
	Started  string    `json:"started,omitempty"`
	Activity Activity  `json:"activity"`
	Code     errs.Code `json:"code,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// NotReady is why a running service refuses writes (see
// service.SetNotReady). The zero value means ready.
type NotReady struct {
	// State replaces "running" in status: "standby" or "degraded".
	State string `json:"state"`
	// Code is the error writes get meanwhile (LEASE_HELD, STORAGE_FULL).
	Code errs.Code `json:"code"`
	// Reason says why and what to do.
	Reason string `json:"reason"`
}

// ReadyResult is the body of /health/ready.
type ReadyResult struct {
	Ready      bool                    `json:"ready"`
	Phase      string                  `json:"phase"`
	InstanceID string                  `json:"instanceId"`
	Services   map[string]ServiceState `json:"services"`
}

// Status is the result of status.
type Status struct {
	InstanceID      string                  `json:"instanceId"`
	Phase           string                  `json:"phase"`
	Ready           bool                    `json:"ready"`
	PID             int                     `json:"pid"`
	Database        string                  `json:"database"`
	DBID            string                  `json:"dbId"`
	Port            int                     `json:"port"`
	Address         string                  `json:"address"`
	Sockets         map[string]string       `json:"sockets"`
	Services        map[string]ServiceState `json:"services"`
	Activity        Activity                `json:"activity"`
	Version         string                  `json:"version"`
	ProtocolVersion string                  `json:"protocolVersion"`
	SchemaVersion   int                     `json:"schemaVersion"`
	Activation      string                  `json:"activation"`
	// StartedAt is when the instance started: null when none runs (the
	// key stays, so the object has one shape either way).
	StartedAt *time.Time `json:"startedAt"`
}

// StopParams are the parameters of stop. Timeout is in seconds; Drain
// defaults to true.
type StopParams struct {
	Drain         *bool    `json:"drain,omitempty"`
	Timeout       *float64 `json:"timeout,omitempty"`
	CancelRunning bool     `json:"cancelRunning,omitempty"`
}

// DrainParams are the parameters of supervisor/drain.
type DrainParams struct {
	Timeout *float64 `json:"timeout,omitempty"`
}

// PhaseResult answers stop, drain and resume.
type PhaseResult struct {
	InstanceID string   `json:"instanceId"`
	Phase      string   `json:"phase"`
	Activity   Activity `json:"activity"`
}

// TicketResult answers auth/issue.
type TicketResult struct {
	InstanceID string `json:"instanceId"`
	Ticket     string `json:"ticket"`
	ExpiresIn  int    `json:"expiresIn"`
}
