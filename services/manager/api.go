package manager

import (
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
	"github.com/deepcode-dev/deepcode/shared/store/schema"
	"github.com/go-chi/chi/v5"
)

// maxWait bounds how long /health/ready?wait= may hold a request.
const maxWait = 60 * time.Second

func (m *Manager) routes() {
	m.svc.Routes = func(_ string, r chi.Router) {
		r.Group(func(r chi.Router) {
			// Management is not for browsers: any Origin is refused.
			r.Use(func(next http.Handler) http.Handler {
				return localauth.Guard(localauth.UnixSocketHost, true, next)
			})
			r.Get("/control/identity", m.handleIdentity)
			r.Post("/control/rpc", m.handleControl)
		})
		r.Get(mgmt.RouteLink, m.handleInternal)
	}
	// The manager's readiness is the instance's: replace the skeleton's.
	m.svc.ReadyHandler = m.handleReady
}

func (m *Manager) handleIdentity(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("challenge")
	if !localauth.ValidChallenge(ch) {
		rpc.WriteHTTPError(w, errs.New(errs.InvalidParams, "challenge must be 64 hexadecimal characters from a fresh random source"), 0)
		return
	}
	if !m.challenges.Admit(ch) {
		rpc.WriteHTTPError(w, errs.New(errs.ChallengeReplayed, "this challenge was already answered: send a fresh one"), 0)
		return
	}
	service.WriteJSON(w, http.StatusOK, mgmt.IdentityResult{
		InstanceID:      m.svc.InstanceID(),
		Proof:           localauth.Proof(m.token, m.svc.InstanceID(), ch),
		ProtocolVersion: buildinfo.ProtocolVersion,
	})
}

func (m *Manager) handleControl(w http.ResponseWriter, r *http.Request) {
	if err := localauth.CheckBearer(r, m.token, m.svc.InstanceID()); err != nil {
		rpc.WriteHTTPError(w, err, 0)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	rpc.ServeHTTP(w, r, m.control, rpc.DefaultMaxMessage, m.svc.Log)
}

// handleReady answers at once, or with ?wait=<duration> holds the request
// until the instance is ready (no client-side polling at start-up).
func (m *Manager) handleReady(w http.ResponseWriter, r *http.Request) {
	var wait time.Duration
	if s := r.URL.Query().Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			rpc.WriteHTTPError(w, errs.New(errs.InvalidParams, "wait must be a duration such as 5s"), 0)
			return
		}
		wait = min(d, maxWait)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		changed := m.waitChange()
		m.mu.Lock()
		ready := m.readyLocked()
		m.mu.Unlock()
		if ready || wait == 0 {
			break
		}
		select {
		case <-changed:
			continue
		case <-deadline.C:
		case <-r.Context().Done():
			return
		case <-m.svc.Context().Done():
		}
		break
	}
	st := m.status()
	res := mgmt.ReadyResult{Phase: st.Phase, InstanceID: st.InstanceID, Services: st.Services}
	m.mu.Lock()
	res.Ready = m.readyLocked()
	m.mu.Unlock()
	code := http.StatusOK
	if !res.Ready {
		code = http.StatusServiceUnavailable
	}
	service.WriteJSON(w, code, res)
}

func (m *Manager) handleInternal(w http.ResponseWriter, r *http.Request) {
	// The peers are deepcode's own services (same user, checked): their
	// activity reports may come in bursts, so the input queue is deeper
	// than a client's.
	m.svc.ServePeer(w, r, m.link, rpc.PeerOptions{InboundFrames: 4096, InboundBytes: 16 << 20})
}

func (m *Manager) status() mgmt.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := mgmt.Status{
		InstanceID:      m.instance.InstanceID,
		Phase:           m.phase,
		Ready:           m.readyLocked(),
		PID:             m.instance.PID,
		Database:        m.instance.Database,
		DBID:            m.instance.DBID,
		Port:            m.instance.Port,
		Address:         m.instance.Address,
		Sockets:         m.instance.Sockets,
		Services:        map[string]mgmt.ServiceState{"manager": {State: "running", PID: os.Getpid()}},
		Version:         buildinfo.Version,
		ProtocolVersion: buildinfo.ProtocolVersion,
		Activation:      m.instance.Activation,
	}
	if !m.instance.StartedAt.IsZero() {
		started := m.instance.StartedAt
		st.StartedAt = &started
	}
	if m.svc.Context().Err() != nil {
		st.Phase = PhaseStopping
	}
	st.SchemaVersion = schema.Latest()
	for name, how := range m.expected {
		state := "down"
		if how == "on-demand" {
			state = "idle"
		}
		st.Services[name] = mgmt.ServiceState{State: state}
	}
	for name, reg := range m.services {
		state := "running"
		if reg.Draining {
			state = "draining"
		}
		if reg.NotReady.State != "" {
			state = reg.NotReady.State
		}
		if reg.Stopping {
			state = mgmt.PhaseStopping
		}
		st.Services[name] = mgmt.ServiceState{State: state, PID: reg.PID, Started: reg.since.UTC().Format(time.RFC3339), Activity: reg.Activity,
			Code: reg.NotReady.Code, Reason: reg.NotReady.Reason}
		st.Activity = st.Activity.Add(reg.Activity)
	}
	return st
}

func itoa(n int) string { return strconv.Itoa(n) }

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return 0, errs.New(errs.InvalidParams, "invalid port %q", s)
	}
	return n, nil
}
