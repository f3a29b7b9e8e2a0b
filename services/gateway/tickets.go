package gateway

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// Limits of browser tickets, from the seed.
const (
	MaxPendingTickets = 64
	TicketTTL         = 60 * time.Second
)

// Tickets holds pending browser tickets in memory only: a restart
// invalidates every unused one.
type Tickets struct {
	mu      sync.Mutex
	pending map[string]time.Time
	max     int
	ttl     time.Duration
	now     func() time.Time
}

// NewTickets makes a store of at most max pending tickets living ttl.
func NewTickets(max int, ttl time.Duration) *Tickets {
	return &Tickets{pending: map[string]time.Time{}, max: max, ttl: ttl, now: time.Now}
}

// Issue creates a ticket, refusing when max unexpired tickets are pending.
func (t *Tickets) Issue() (mgmt.IssuedTicket, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return mgmt.IssuedTicket{}, errs.Wrap(err, errs.Internal, "no randomness")
	}
	tk := base64.RawURLEncoding.EncodeToString(b)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	if len(t.pending) >= t.max {
		return mgmt.IssuedTicket{}, errs.New(errs.Overloaded, "%d browser tickets are already pending; use one or wait a minute", t.max)
	}
	t.pending[tk] = t.now().Add(t.ttl)
	return mgmt.IssuedTicket{Ticket: tk, ExpiresIn: int(t.ttl / time.Second)}, nil
}

// Consume uses a ticket once. Unknown, used and expired tickets all fail the
// same way.
func (t *Tickets) Consume(ticket string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	for k := range t.pending {
		if subtle.ConstantTimeCompare([]byte(k), []byte(ticket)) == 1 {
			delete(t.pending, k)
			return nil
		}
	}
	return errs.New(errs.Unauthorized, "this access link is invalid, used or expired: run `deepcode web` again")
}

// Pending counts unexpired tickets.
func (t *Tickets) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked()
	return len(t.pending)
}

func (t *Tickets) expireLocked() {
	now := t.now()
	for k, exp := range t.pending {
		if !now.Before(exp) {
			delete(t.pending, k)
		}
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
