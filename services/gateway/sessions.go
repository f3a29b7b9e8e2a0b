package gateway

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Browser session limits, from the seed.
const (
	MaxSessions        = 64
	SessionTTL         = 12 * time.Hour
	ExchangesPerMinute = 60
	SessionCookie      = "deepcode_session"
)

// Sessions holds browser sessions in memory only: a restart invalidates
// them all. A session's sockets are closed when it is revoked or expires.
type Sessions struct {
	mu       sync.Mutex
	sessions map[string]*browserSession
	max      int
	ttl      time.Duration
	now      func() time.Time

	attempts []time.Time // exchange attempts in the last minute
}

type browserSession struct {
	token   string
	expires time.Time
	peers   map[*rpc.Peer]struct{}
	timer   *time.Timer
}

// NewSessions makes a session store.
func NewSessions(max int, ttl time.Duration) *Sessions {
	return &Sessions{sessions: map[string]*browserSession{}, max: max, ttl: ttl, now: time.Now}
}

// allowExchange counts an exchange attempt against the per-minute limit.
func (s *Sessions) allowExchange() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	keep := s.attempts[:0]
	for _, t := range s.attempts {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	s.attempts = keep
	if len(s.attempts) >= ExchangesPerMinute {
		return false
	}
	s.attempts = append(s.attempts, now)
	return true
}

// create makes a session and returns its secret token.
func (s *Sessions) create() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", errs.Wrap(err, errs.Internal, "no randomness")
	}
	tok := base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	if len(s.sessions) >= s.max {
		return "", errs.New(errs.Overloaded, "%d browser sessions are open; log one out first", s.max)
	}
	bs := &browserSession{token: tok, expires: s.now().Add(s.ttl), peers: map[*rpc.Peer]struct{}{}}
	bs.timer = time.AfterFunc(s.ttl, func() { s.revoke(tok) })
	s.sessions[tok] = bs
	return tok, nil
}

// lookup finds a live session by token, in constant time per entry.
func (s *Sessions) lookupLocked(tok string) *browserSession {
	if tok == "" {
		return nil
	}
	var found *browserSession
	for k, bs := range s.sessions {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			found = bs
		}
	}
	if found != nil && !s.now().Before(found.expires) {
		return nil
	}
	return found
}

// valid reports whether tok names a live session.
func (s *Sessions) valid(tok string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookupLocked(tok) != nil
}

// attach records a socket of the session, so that logout and expiry close
// it; false when the session is gone.
func (s *Sessions) attach(tok string, p *rpc.Peer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	bs := s.lookupLocked(tok)
	if bs == nil {
		return false
	}
	bs.peers[p] = struct{}{}
	return true
}

func (s *Sessions) detach(tok string, p *rpc.Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bs := s.sessions[tok]; bs != nil {
		delete(bs.peers, p)
	}
}

// revoke ends a session and closes its sockets; other sessions go on.
func (s *Sessions) revoke(tok string) bool {
	s.mu.Lock()
	bs := s.lookupLockedAny(tok)
	if bs != nil {
		delete(s.sessions, bs.token)
		bs.timer.Stop()
	}
	s.mu.Unlock()
	if bs == nil {
		return false
	}
	for p := range bs.peers {
		p.Close(ClosePolicyViolation, "session ended")
	}
	return true
}

func (s *Sessions) lookupLockedAny(tok string) *browserSession {
	for k, bs := range s.sessions {
		if subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return bs
		}
	}
	return nil
}

func (s *Sessions) expireLocked() {
	now := s.now()
	for k, bs := range s.sessions {
		if !now.Before(bs.expires) {
			delete(s.sessions, k)
			bs.timer.Stop()
			for p := range bs.peers {
				p.Close(ClosePolicyViolation, "session expired")
			}
		}
	}
}

// Count is the number of live sessions.
func (s *Sessions) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	return len(s.sessions)
}

// ClosePolicyViolation closes a socket whose session ended (1008).
const ClosePolicyViolation = rpc.ClosePolicy
