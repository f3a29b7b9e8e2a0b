package manager

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

func (m *Manager) methods() {
	m.control = rpc.NewMux()
	m.control.Handle(mgmt.MethodStatus, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.Status, error) {
		return m.status(), nil
	}))
	m.control.Handle(mgmt.MethodStop, rpc.Method(m.handleStop))
	m.control.Handle(mgmt.MethodDrain, rpc.Method(func(ctx context.Context, p mgmt.DrainParams) (mgmt.PhaseResult, error) {
		timeout, err := m.timeoutParam(p.Timeout)
		if err != nil {
			return mgmt.PhaseResult{}, err
		}
		if err := m.drain(ctx, timeout); err != nil {
			return mgmt.PhaseResult{}, err
		}
		return m.phaseResult(), nil
	}))
	m.control.Handle(mgmt.MethodResume, rpc.Method(func(ctx context.Context, _ struct{}) (mgmt.PhaseResult, error) {
		if err := m.resume(ctx); err != nil {
			return mgmt.PhaseResult{}, err
		}
		return m.phaseResult(), nil
	}))
	m.control.Handle(mgmt.MethodIssue, rpc.Method(m.issueTicket))

	// The manager's end of the link (the contract's link surface): the
	// services register and report their activity over it.
	m.link = rpc.NewMux()
	m.link.Handle(mgmt.MethodServiceRegister, rpc.Method(func(ctx context.Context, p mgmt.RegisterParams) (mgmt.RegisterResult, error) {
		return m.register(p, rpc.PeerFromContext(ctx))
	}))
	m.link.Handle(mgmt.NotifyServiceActivity, rpc.Method(func(ctx context.Context, p mgmt.ActivityParams) (struct{}, error) {
		m.updateActivity(rpc.PeerFromContext(ctx), p)
		return struct{}{}, nil
	}))
}

func (m *Manager) phaseResult() mgmt.PhaseResult {
	st := m.status()
	return mgmt.PhaseResult{InstanceID: st.InstanceID, Phase: st.Phase, Activity: st.Activity}
}

func (m *Manager) timeoutParam(t *float64) (time.Duration, error) {
	if t == nil {
		return m.svc.Config.Service.StopTimeout, nil
	}
	if math.IsNaN(*t) || *t < 0 || *t > 24*3600 {
		return 0, errs.New(errs.InvalidParams, "timeout must be between 0 and 86400 seconds")
	}
	return time.Duration(*t * float64(time.Second)), nil
}

func (m *Manager) handleStop(ctx context.Context, p mgmt.StopParams) (mgmt.PhaseResult, error) {
	timeout, err := m.timeoutParam(p.Timeout)
	if err != nil {
		return mgmt.PhaseResult{}, err
	}
	drain := p.Drain == nil || *p.Drain
	switch {
	case p.CancelRunning:
		if err := m.cancelRunning(ctx, timeout); err != nil {
			return mgmt.PhaseResult{}, err
		}
	case drain:
		if err := m.drain(ctx, timeout); err != nil {
			return mgmt.PhaseResult{}, err
		}
	}
	m.setPhase(PhaseStopping)
	res := m.phaseResult()
	m.svc.Log.Info("stop requested", "drain", drain, "cancelRunning", p.CancelRunning)
	go m.stopInstance()
	return res, nil
}

// drain pauses admission in every service and waits for their activity to
// reach zero. On timeout it restores the previous phase and admission, and
// the instance keeps running.
func (m *Manager) drain(ctx context.Context, timeout time.Duration) error {
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	prev := m.setPhase(PhaseDraining)
	if prev == PhaseStopping {
		m.setPhase(prev)
		return errs.New(errs.ServiceUnavailable, "the instance is already stopping")
	}
	restore := func() {
		m.broadcast(context.WithoutCancel(ctx), mgmt.MethodServiceResume)
		m.setPhase(prev)
	}
	if err := m.broadcast(ctx, mgmt.MethodServiceDrain); err != nil {
		restore()
		return err
	}
	if err := m.waitIdle(ctx, timeout); err != nil {
		restore()
		return err
	}
	return nil
}

func (m *Manager) resume(ctx context.Context) error {
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	m.mu.Lock()
	phase := m.phase
	m.mu.Unlock()
	if phase == PhaseStopping {
		return errs.New(errs.ServiceUnavailable, "the instance is stopping and cannot resume")
	}
	if err := m.broadcast(ctx, mgmt.MethodServiceResume); err != nil {
		return err
	}
	m.setPhase(PhaseRunning)
	return nil
}

// cancelRunning pauses admission, asks every service to cancel its running
// work, and waits (bounded) for it to settle.
func (m *Manager) cancelRunning(ctx context.Context, timeout time.Duration) error {
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	m.setPhase(PhaseDraining)
	if err := m.broadcast(ctx, mgmt.MethodServiceDrain); err != nil {
		return err
	}
	if err := m.broadcast(ctx, mgmt.MethodServiceCancel); err != nil {
		return err
	}
	if err := m.waitIdle(ctx, timeout); err != nil {
		m.svc.Log.Warn("work still settling after cancel; stopping anyway", "err", err)
	}
	return nil
}

// broadcast calls method on every registered service.
func (m *Manager) broadcast(ctx context.Context, method string) error {
	regs := m.peers()
	errc := make(chan error, len(regs))
	for _, reg := range regs {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var a mgmt.ActivityParams
			err := reg.peer.Call(cctx, method, nil, &a)
			if err == nil {
				m.updateActivity(reg.peer, a)
			} else if errs.Is(err, errs.ConnectionLost) {
				err = nil // the service is gone: nothing left to pause
			} else {
				err = fmt.Errorf("%s: %w", reg.Name, err)
			}
			errc <- err
		}()
	}
	var first error
	for range regs {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return errs.Wrap(first, errs.ServiceUnavailable, "a service did not accept %s", method)
	}
	return nil
}

// waitIdle waits until no service reports activity.
func (m *Manager) waitIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		changed := m.waitChange()
		a := m.totalActivity()
		if !a.Busy() {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return errs.New(errs.DrainTimeout,
				"work still running after %s (%d turns, %d terminals, %d handlers): admission resumed and the service keeps running; retry with a longer --timeout or use --cancel-running",
				timeout, a.Turns, a.Terminals, a.Handlers).With("activity", a)
		case <-ctx.Done():
			return errs.Wrap(ctx.Err(), errs.DrainTimeout, "drain abandoned by the client")
		}
	}
}

func (m *Manager) issueTicket(ctx context.Context, _ struct{}) (mgmt.TicketResult, error) {
	m.mu.Lock()
	gw := m.services["gateway"]
	phase := m.phase
	m.mu.Unlock()
	if phase == PhaseStopping {
		return mgmt.TicketResult{}, errs.New(errs.ServiceUnavailable, "the instance is stopping")
	}
	if gw == nil {
		return mgmt.TicketResult{}, errs.New(errs.ServiceUnavailable, "the gateway is not running, so no browser ticket can be issued; check `deepcode service status`")
	}
	var tk mgmt.IssuedTicket
	if err := gw.peer.Call(ctx, mgmt.MethodGatewayIssueTicket, nil, &tk); err != nil {
		return mgmt.TicketResult{}, err
	}
	return mgmt.TicketResult{InstanceID: m.svc.InstanceID(), Ticket: tk.Ticket, ExpiresIn: tk.ExpiresIn}, nil
}
