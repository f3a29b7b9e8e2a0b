package gateway

import (
	"encoding/base64"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// fakeClock is an injected clock for Tickets.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestTickets(max int) (*Tickets, *fakeClock) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	tk := NewTickets(max, TicketTTL)
	tk.now = clock.Now
	return tk, clock
}

func mustIssue(t *testing.T, tk *Tickets) string {
	t.Helper()
	it, err := tk.Issue()
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return it.Ticket
}

func TestTicketIsFreshAndSingleUse(t *testing.T) {
	t.Parallel()
	tk, _ := newTestTickets(MaxPendingTickets)
	it, err := tk.Issue()
	if err != nil {
		t.Fatal(err)
	}
	if it.ExpiresIn != 60 {
		t.Fatalf("expiresIn %d, want 60", it.ExpiresIn)
	}
	raw, err := base64.RawURLEncoding.DecodeString(it.Ticket)
	if err != nil || len(raw) != 32 {
		t.Fatalf("ticket %q is not 256 random bits in base64url: %v", it.Ticket, err)
	}
	other := mustIssue(t, tk)
	if other == it.Ticket {
		t.Fatal("two tickets are equal")
	}
	if tk.Pending() != 2 {
		t.Fatalf("pending %d, want 2", tk.Pending())
	}
	if err := tk.Consume(it.Ticket); err != nil {
		t.Fatalf("first use: %v", err)
	}
	for _, bad := range []string{it.Ticket, "", "x", it.Ticket[:len(it.Ticket)-1], it.Ticket + "A", other + " "} {
		if err := tk.Consume(bad); !errs.Is(err, errs.Unauthorized) {
			t.Errorf("Consume(%q) = %v, want UNAUTHORIZED", bad, err)
		}
	}
	// Refusals consumed nothing else.
	if err := tk.Consume(other); err != nil {
		t.Fatalf("the other ticket: %v", err)
	}
	if tk.Pending() != 0 {
		t.Fatalf("pending %d, want 0", tk.Pending())
	}
}

func TestTicketExpires(t *testing.T) {
	t.Parallel()
	tk, clock := newTestTickets(MaxPendingTickets)
	a, b := mustIssue(t, tk), mustIssue(t, tk)
	clock.Add(TicketTTL - time.Millisecond)
	if err := tk.Consume(a); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	clock.Add(time.Millisecond)
	if err := tk.Consume(b); !errs.Is(err, errs.Unauthorized) {
		t.Fatalf("at expiry: %v, want UNAUTHORIZED", err)
	}
	if tk.Pending() != 0 {
		t.Fatalf("pending %d after expiry", tk.Pending())
	}
	// A ticket issued later has its own minute.
	c := mustIssue(t, tk)
	clock.Add(30 * time.Second)
	if err := tk.Consume(c); err != nil {
		t.Fatalf("a later ticket: %v", err)
	}
}

func TestTicketLimit(t *testing.T) {
	t.Parallel()
	tk, clock := newTestTickets(MaxPendingTickets)
	var issued []string
	for range MaxPendingTickets {
		issued = append(issued, mustIssue(t, tk))
		clock.Add(100 * time.Millisecond)
	}
	_, err := tk.Issue()
	e, ok := errs.As(err)
	if !ok || e.Code != errs.Overloaded || !e.Retryable {
		t.Fatalf("the 65th pending ticket: %v, want retryable OVERLOADED", err)
	}
	// Using one frees a place.
	if err := tk.Consume(issued[10]); err != nil {
		t.Fatal(err)
	}
	mustIssue(t, tk)
	if _, err := tk.Issue(); !errs.Is(err, errs.Overloaded) {
		t.Fatalf("full again: %v", err)
	}
	// So does expiry: the first ticket was issued 6.4 s before the others'
	// last, so moving to its expiry frees exactly it.
	clock.Add(TicketTTL - time.Duration(MaxPendingTickets)*100*time.Millisecond)
	if got := tk.Pending(); got != MaxPendingTickets-1 {
		t.Fatalf("pending %d after the first expired, want %d", got, MaxPendingTickets-1)
	}
	mustIssue(t, tk)
	clock.Add(TicketTTL)
	if tk.Pending() != 0 {
		t.Fatalf("pending %d after every ticket expired", tk.Pending())
	}
	for range MaxPendingTickets {
		mustIssue(t, tk)
	}
}

func TestTicketsConcurrently(t *testing.T) {
	t.Parallel()
	tk, _ := newTestTickets(MaxPendingTickets)
	var ok, overloaded atomic.Int64
	var wg sync.WaitGroup
	for range 4 * MaxPendingTickets {
		wg.Go(func() {
			if _, err := tk.Issue(); err == nil {
				ok.Add(1)
			} else if errs.Is(err, errs.Overloaded) {
				overloaded.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != MaxPendingTickets || overloaded.Load() != 3*MaxPendingTickets {
		t.Fatalf("%d issued, %d overloaded", ok.Load(), overloaded.Load())
	}

	tk2, _ := newTestTickets(MaxPendingTickets)
	ticket := mustIssue(t, tk2)
	var used atomic.Int64
	for range 32 {
		wg.Go(func() {
			if tk2.Consume(ticket) == nil {
				used.Add(1)
			}
		})
	}
	wg.Wait()
	if used.Load() != 1 {
		t.Fatalf("one ticket used %d times", used.Load())
	}
}

// FuzzExchangeBody: the exchange accepts exactly {"ticket": "<non-empty
// string>"} (whitespace aside), and nothing else, without panicking.
func FuzzExchangeBody(f *testing.F) {
	for _, s := range []string{
		`{"ticket":"abc"}`, ` {"ticket" : "abc"} `, `{"ticket":""}`, `{"ticket":1}`,
		`{"ticket":"a","ticket":"b"}`, `{"ticket":"a"}}`, `{"ticket":"a"}{}`, `{"Ticket":"a"}`,
		`{"ticket":"a","x":1}`, `[]`, `null`, `"ticket"`, `{"ticket":"\u0000"}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ticket, err := parseExchange(body)
		if err != nil {
			if e, ok := errs.As(err); !ok || e.Code != errs.InvalidParams {
				t.Fatalf("%q: %v, want INVALID_PARAMS", body, err)
			}
			return
		}
		// Accepted: it must be one valid object whose only member is a
		// non-empty "ticket" string equal to what was returned.
		var m map[string]any
		if !json.Valid(body) || json.Unmarshal(body, &m) != nil || len(m) != 1 {
			t.Fatalf("accepted %q", body)
		}
		if v, ok := m["ticket"].(string); !ok || v == "" || v != ticket {
			t.Fatalf("accepted %q as %q", body, ticket)
		}
	})
}
