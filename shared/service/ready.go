package service

import (
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// Readiness states a running service may report instead of "running".
const (
	// StateStandby: the service runs and serves reads, but another process
	// holds what it needs to write (agentd waiting for the runtime lease).
	StateStandby = "standby"
	// StateDegraded: the service runs but cannot do its work now (the
	// disk is full, the database is read-only).
	StateDegraded = "degraded"
)

// NotReady is why a running service refuses writes: what status shows and
// /health/ready answers. The zero value means ready.
type NotReady = mgmt.NotReady

// SetNotReady marks the service degraded: it runs, but writes fail with
// code (a stable, usually retryable code such as STORAGE_FULL) for reason,
// a sentence saying why and what to do. /health/ready answers 503 with
// both, and the manager's status shows the service "degraded" and the
// instance not ready, until SetReady. Calling it again replaces the reason.
func (s *Service) SetNotReady(code errs.Code, reason string) {
	s.setNotReady(NotReady{State: StateDegraded, Code: code, Reason: reason})
}

// SetStandby is SetNotReady for a service that waits for another process to
// let go of something (a lease): status shows it "standby".
func (s *Service) SetStandby(code errs.Code, reason string) {
	s.setNotReady(NotReady{State: StateStandby, Code: code, Reason: reason})
}

// SetReady undoes SetNotReady and SetStandby.
func (s *Service) SetReady() { s.setNotReady(NotReady{}) }

// NotReadyState is the current reason the service is not ready, and whether
// there is one.
func (s *Service) NotReadyState() (NotReady, bool) {
	nr, _ := s.notReady.Load().(NotReady)
	return nr, nr.State != ""
}

// NotReadyError is the error a handler refused for the current reason
// returns: the reason's code and message, or nil while ready.
func (s *Service) NotReadyError() error {
	nr, ok := s.NotReadyState()
	if !ok {
		return nil
	}
	return errs.New(nr.Code, "%s", nr.Reason)
}

func (s *Service) setNotReady(nr NotReady) {
	old, _ := s.notReady.Swap(nr).(NotReady)
	if old == nr {
		return
	}
	if nr.State == "" {
		s.Log.Info("ready again", "was", old.State)
	} else {
		s.Log.Warn("not ready", "state", nr.State, "code", nr.Code, "reason", nr.Reason)
	}
	// The manager acts on readiness at once (status, /health/ready?wait):
	// reportState carries it and urgentReport treats a change as urgent.
	s.ActivityChanged()
}
