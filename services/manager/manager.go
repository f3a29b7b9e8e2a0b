// Package manager is the instance's management plane: identity and token,
// the HMAC challenge, status, stop, drain and resume across the services,
// browser tickets (obtained from the gateway), and the registry of running
// services that readiness and drain are computed from.
package manager

import (
	"context"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
)

// EnvServices lists the instance's services and how each is started, e.g.
// "gateway=always,agentd=on-demand". The supervisor sets it from the
// binaries it found; without it only the gateway is expected.
const EnvServices = "DEEPCODE_SERVICES"

// Phases of the instance.
const (
	PhaseRunning  = mgmt.PhaseRunning
	PhaseDraining = mgmt.PhaseDraining
	PhaseStopping = mgmt.PhaseStopping
)

// Spec is the manager's service description.
func Spec() service.Spec {
	return service.Spec{
		Name: "manager",
		Sockets: func(l *paths.Layout, _ *config.Config) []activation.Spec {
			return []activation.Spec{{Name: "manager", Kind: activation.Unix, Path: l.Socket(paths.ManagerSocket)}}
		},
		Setup: setup,
	}
}

// Manager is the running management plane.
type Manager struct {
	svc        *service.Service
	token      string
	rootLock   *discovery.Lock // held when the manager is the instance's root
	challenges *localauth.ChallengeCache
	expected   map[string]string // service name → "always" | "on-demand"
	control    *rpc.Mux
	link       *rpc.Mux

	mu        sync.Mutex
	instance  discovery.Instance
	phase     string
	services  map[string]*registration
	changed   chan struct{} // closed and replaced on every change
	stopAsked bool

	drainMu sync.Mutex
}

type registration struct {
	mgmt.RegisterParams
	peer  *rpc.Peer
	since time.Time
	seq   uint64 // of the newest activity report applied
}

func setup(ctx context.Context, svc *service.Service) error {
	m := &Manager{
		svc:        svc,
		challenges: localauth.NewChallengeCache(4096, 10*time.Minute),
		expected:   parseServices(os.Getenv(EnvServices)),
		phase:      PhaseRunning,
		services:   map[string]*registration{},
		changed:    make(chan struct{}),
	}
	svc.App = m
	if err := svc.Layout.EnsureServiceDir(); err != nil {
		return err
	}
	if err := m.establishIdentity(ctx); err != nil {
		return err
	}
	if err := m.writeInstance(); err != nil {
		m.releaseRoot()
		return errs.Wrap(err, errs.StartFailed, "cannot write %s", svc.Layout.InstanceJSON())
	}
	m.routes()
	m.methods()
	svc.Log.Info("instance identity", "instance", svc.InstanceID(), "database", svc.Layout.Database, "schema", schema.Latest())
	return nil
}

// establishIdentity adopts the supervisor's instance id and token, or, when
// the manager is the instance's root (no supervisor), takes instance.lock
// and creates both.
func (m *Manager) establishIdentity(ctx context.Context) error {
	l := m.svc.Layout
	if m.svc.InstanceID() != "" {
		tok, err := discovery.ReadToken(l)
		if err != nil {
			return err
		}
		m.token = tok
		return nil
	}
	lock, err := discovery.TryInstanceLock(ctx, l, 0)
	if err != nil {
		return err
	}
	m.rootLock = lock
	m.svc.SetInstanceID(discovery.NewInstanceID())
	m.token = discovery.NewToken()
	if err := discovery.WriteToken(l, m.token); err != nil {
		lock.Release()
		return errs.Wrap(err, errs.StartFailed, "cannot write the token")
	}
	return nil
}

func (m *Manager) releaseRoot() {
	if m.rootLock == nil {
		return
	}
	discovery.RemoveInstance(m.svc.Layout, m.svc.InstanceID())
	discovery.RemoveTokenIf(m.svc.Layout, m.token)
	m.rootLock.Release()
	m.rootLock = nil
}

func (m *Manager) activationKind() string {
	switch {
	case m.svc.SupervisorPID != 0:
		return "supervisor"
	case os.Getenv("INVOCATION_ID") != "":
		return "systemd"
	}
	return "standalone"
}

// writeInstance records the instance's identity. Under the supervisor, the
// supervisor (the root) has written instance.json already; the manager only
// keeps the same record for status.
func (m *Manager) writeInstance() error {
	l := m.svc.Layout
	port := m.svc.Config.Port
	if p := os.Getenv(service.EnvPort); p != "" {
		if n, err := parsePort(p); err == nil {
			port = n
		}
	}
	rootPID := os.Getpid()
	if m.svc.SupervisorPID != 0 {
		rootPID = m.svc.SupervisorPID
	}
	inst := discovery.NewInstance(l, m.svc.InstanceID(), rootPID, port, m.activationKind())
	if m.rootLock == nil {
		if cur, err := discovery.ReadInstance(l); err == nil && cur.InstanceID == inst.InstanceID {
			inst = cur
		}
	}
	m.mu.Lock()
	m.instance = *inst
	m.mu.Unlock()
	if m.rootLock == nil {
		return nil
	}
	return discovery.WriteInstance(l, inst)
}

func addressFor(port int) string {
	if port <= 0 {
		return ""
	}
	return "127.0.0.1:" + itoa(port)
}

// updateAddress records the gateway's real address (port 0 picks one).
func (m *Manager) updateAddress(addr string) {
	_, p, ok := strings.Cut(addr, "127.0.0.1:")
	if !ok {
		return
	}
	port, err := parsePort(p)
	if err != nil {
		return
	}
	m.mu.Lock()
	if m.instance.Port == port {
		m.mu.Unlock()
		return
	}
	m.instance.Port, m.instance.Address = port, addressFor(port)
	inst := m.instance
	m.mu.Unlock()
	if m.rootLock == nil {
		return // the root owns instance.json
	}
	if err := discovery.WriteInstance(m.svc.Layout, &inst); err != nil {
		m.svc.Log.Error("cannot update instance.json", "err", err)
	}
}

var _ interface {
	service.App
	service.InstanceManager
} = (*Manager)(nil)

// ManagesInstance: the manager is the other end of every service's link.
func (m *Manager) ManagesInstance() {}

// Stop marks the instance stopping and releases its root (instance.lock).
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.phase = PhaseStopping
	m.mu.Unlock()
	m.releaseRoot()
	return nil
}

// notifyChanged wakes everyone waiting for registry or activity changes.
// Callers hold m.mu.
func (m *Manager) notifyChangedLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *Manager) register(p mgmt.RegisterParams, peer *rpc.Peer) (mgmt.RegisterResult, error) {
	if p.Name == "" || p.Name == "manager" || len(p.Name) > 64 {
		return mgmt.RegisterResult{}, errs.New(errs.InvalidParams, "invalid service name %q", p.Name)
	}
	reg := &registration{RegisterParams: p, peer: peer, since: time.Now()}
	m.mu.Lock()
	old := m.services[p.Name]
	m.services[p.Name] = reg
	phase := m.phase
	m.notifyChangedLocked()
	m.mu.Unlock()
	if old != nil && old.peer != peer {
		old.peer.Close(rpc.CloseNormal, "replaced by a newer registration")
	}
	if p.Address != "" {
		m.updateAddress(p.Address)
	}
	m.svc.Log.Info("service registered", "name", p.Name, "pid", p.PID)
	go func() {
		<-peer.Done()
		m.unregister(reg)
	}()
	return mgmt.RegisterResult{InstanceID: m.svc.InstanceID(), Phase: phase, SchemaVersion: schema.Latest()}, nil
}

func (m *Manager) unregister(reg *registration) {
	m.mu.Lock()
	if m.services[reg.Name] == reg {
		delete(m.services, reg.Name)
		m.notifyChangedLocked()
		m.svc.Log.Info("service gone", "name", reg.Name, "pid", reg.PID)
	}
	m.mu.Unlock()
}

func (m *Manager) updateActivity(peer *rpc.Peer, a mgmt.ActivityParams) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, reg := range m.services {
		if reg.peer == peer {
			if a.Seq <= reg.seq {
				return // an older report overtaken by a newer one
			}
			reg.Activity, reg.Draining, reg.NotReady, reg.Stopping, reg.seq = a.Activity, a.Draining, a.NotReady, a.Stopping, a.Seq
			m.notifyChangedLocked()
			return
		}
	}
}

// readyLocked: every always-on service is registered, no registered
// service says it refuses writes (standby, degraded), and we are not
// stopping.
func (m *Manager) readyLocked() bool {
	if m.phase == PhaseStopping || m.svc.Context().Err() != nil {
		return false // a manager on its way out is never adopted as ready
	}
	for name, how := range m.expected {
		if how == "always" && m.services[name] == nil {
			return false
		}
	}
	for _, reg := range m.services {
		// A stopping service is on its way out, replaced on the next
		// connection: its last word on readiness no longer counts.
		if reg.NotReady.State != "" && !reg.Stopping {
			return false
		}
	}
	return true
}

// waitChange returns a channel closed at the next change.
func (m *Manager) waitChange() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Manager) totalActivity() service.Activity {
	m.mu.Lock()
	defer m.mu.Unlock()
	var total service.Activity
	for _, reg := range m.services {
		total = total.Add(reg.Activity)
	}
	return total
}

func (m *Manager) peers() []*registration {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*registration, 0, len(m.services))
	for _, r := range m.services {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (m *Manager) setPhase(p string) (prev string) {
	m.mu.Lock()
	prev, m.phase = m.phase, p
	if prev != p {
		m.notifyChangedLocked()
	}
	m.mu.Unlock()
	if prev != p {
		m.svc.Log.Info("phase", "from", prev, "to", p)
		for _, reg := range m.peers() {
			reg.peer.Notify(api.NotifyServicePhase, api.ServicePhaseParams{Phase: p})
		}
	}
	return prev
}

// stopInstance ends the whole instance: the supervisor stops every service
// in order; without one, the manager stops itself.
func (m *Manager) stopInstance() {
	m.mu.Lock()
	already := m.stopAsked
	m.stopAsked = true
	m.mu.Unlock()
	if already {
		return
	}
	if pid := m.svc.SupervisorPID; pid != 0 && pid == os.Getppid() {
		if err := terminate(pid); err != nil {
			m.svc.Log.Error("cannot signal the supervisor", "pid", pid, "err", err)
		}
		return
	}
	m.svc.RequestStop("stop requested")
}

func parseServices(s string) map[string]string {
	out := map[string]string{}
	if s == "" {
		out["gateway"] = "always"
		return out
	}
	for _, part := range strings.Split(s, ",") {
		name, how, _ := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" {
			continue
		}
		if how != "on-demand" {
			how = "always"
		}
		out[name] = how
	}
	return out
}
