package store

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func openClocked(t *testing.T) (*DB, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	return openTest(t, filepath.Join(t.TempDir(), "lease.sqlite3"), WithClock(clock.Now)), clock
}

func TestLeaseLifecycle(t *testing.T) {
	db, clock := openClocked(t)
	ctx := testContext(t)
	t0 := clock.Now()

	if _, ok, err := db.ReadLease(ctx, "sched"); err != nil || ok {
		t.Fatalf("ReadLease of a new name = %v, %v", ok, err)
	}

	a, err := db.AcquireLease(ctx, "sched", "A", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "sched" || a.Holder != "A" || a.Token != 1 || !a.Expires.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("first acquire = %+v", a)
	}

	// Another holder is refused with LEASE_HELD naming the holder and expiry.
	_, err = db.AcquireLease(ctx, "sched", "B", time.Second)
	e := wantCode(t, err, errs.LeaseHeld)
	if e.Data["holder"] != "A" || e.Data["expiresAt"] != a.Expires.UTC().Format(time.RFC3339Nano) || e.Data["retryAfterMs"] != int64(10000) {
		t.Fatalf("LEASE_HELD data = %v", e.Data)
	}

	// The same holder re-acquiring extends and keeps the token.
	clock.Advance(time.Second)
	a2, err := db.AcquireLease(ctx, "sched", "A", 10*time.Second)
	if err != nil || a2.Token != 1 || !a2.Expires.Equal(t0.Add(11*time.Second)) {
		t.Fatalf("re-acquire = %+v, %v", a2, err)
	}

	// Renew moves the expiry.
	clock.Advance(5 * time.Second)
	a3, err := db.RenewLease(ctx, a2, 20*time.Second)
	if err != nil || a3.Token != 1 || !a3.Expires.Equal(clock.Now().Add(20*time.Second)) {
		t.Fatalf("renew = %+v, %v", a3, err)
	}
	if got, ok, err := db.ReadLease(ctx, "sched"); err != nil || !ok || got.Holder != "A" || got.Token != 1 || !got.Expires.Equal(a3.Expires) {
		t.Fatalf("ReadLease = %+v, %v, %v", got, ok, err)
	}

	// A fenced write works while held.
	if err := db.Fenced(ctx, a3, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}

	// Expired by the clock: fenced writes are refused...
	clock.Advance(20 * time.Second)
	wantCode(t, db.Fenced(ctx, a3, func(*sql.Tx) error { t.Fatal("fn ran on an expired lease"); return nil }), errs.LeaseLost)
	// ...but renewing a just-expired lease nobody took succeeds.
	a4, err := db.RenewLease(ctx, a3, 10*time.Second)
	if err != nil || a4.Token != 1 {
		t.Fatalf("renew after expiry = %+v, %v", a4, err)
	}

	// Expire again; B takes over with a higher token.
	clock.Advance(11 * time.Second)
	b, err := db.AcquireLease(ctx, "sched", "B", 10*time.Second)
	if err != nil || b.Token != 2 || b.Holder != "B" {
		t.Fatalf("takeover = %+v, %v", b, err)
	}
	_, err = db.RenewLease(ctx, a4, time.Second)
	wantCode(t, err, errs.LeaseLost)
	wantCode(t, db.ReleaseLease(ctx, a4), errs.LeaseLost)
	wantCode(t, db.Fenced(ctx, a4, func(*sql.Tx) error { t.Fatal("fn ran under a lost lease"); return nil }), errs.LeaseLost)

	// Release keeps the row and its token.
	if err := db.ReleaseLease(ctx, b); err != nil {
		t.Fatal(err)
	}
	got, ok, err := db.ReadLease(ctx, "sched")
	if err != nil || !ok || got.Holder != "" || got.Token != 2 || !got.Expires.IsZero() {
		t.Fatalf("released lease reads %+v, %v, %v", got, ok, err)
	}
	wantCode(t, db.ReleaseLease(ctx, b), errs.LeaseLost)
	_, err = db.RenewLease(ctx, b, time.Second)
	wantCode(t, err, errs.LeaseLost)
	wantCode(t, db.Fenced(ctx, b, func(*sql.Tx) error { return nil }), errs.LeaseLost)

	// The next acquisition, even by a past holder, gets a higher token.
	a5, err := db.AcquireLease(ctx, "sched", "A", time.Second)
	if err != nil || a5.Token != 3 {
		t.Fatalf("acquire after release = %+v, %v", a5, err)
	}
	// The same holder re-acquiring after its own lease expired is a new tenure.
	clock.Advance(2 * time.Second)
	a6, err := db.AcquireLease(ctx, "sched", "A", time.Second)
	if err != nil || a6.Token != 4 {
		t.Fatalf("acquire after own expiry = %+v, %v", a6, err)
	}
	wantCode(t, db.Fenced(ctx, a5, func(*sql.Tx) error { return nil }), errs.LeaseLost)
}

func TestLeaseTokenMonotonicPerName(t *testing.T) {
	db, clock := openClocked(t)
	ctx := testContext(t)
	var last int64
	for i := 0; i < 20; i++ {
		holder := []string{"A", "B", "C"}[i%3]
		l, err := db.AcquireLease(ctx, "n1", holder, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token != last+1 {
			t.Fatalf("iteration %d: token %d after %d", i, l.Token, last)
		}
		last = l.Token
		switch i % 2 {
		case 0:
			if err := db.ReleaseLease(ctx, l); err != nil {
				t.Fatal(err)
			}
		case 1:
			clock.Advance(time.Minute) // let it expire instead
		}
	}
	// Names are independent.
	if l, err := db.AcquireLease(ctx, "n2", "A", time.Minute); err != nil || l.Token != 1 {
		t.Fatalf("other name = %+v, %v", l, err)
	}
}

func TestFencedRollsBackWhenFnFails(t *testing.T) {
	db, _ := openClocked(t)
	ctx := testContext(t)
	if _, err := db.SQL().Exec(`CREATE TABLE w (v INTEGER NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireLease(ctx, "writer", "A", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	write := func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO w VALUES (1)`)
		return err
	}
	err = db.Fenced(ctx, l, func(tx *sql.Tx) error {
		if err := write(tx); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Fenced = %v, want the fn's error as cause", err)
	}
	func() {
		defer func() { recover() }()
		db.Fenced(ctx, l, func(tx *sql.Tx) error {
			write(tx)
			panic("x")
		})
	}()
	var n int
	if err := db.SQL().QueryRow(`SELECT count(*) FROM w`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows after failed fenced writes = %d, %v", n, err)
	}
	if err := db.Fenced(ctx, l, write); err != nil {
		t.Fatal(err)
	}
	if err := db.SQL().QueryRow(`SELECT count(*) FROM w`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows = %d, %v", n, err)
	}
}

func TestFencedLostAfterTakeover(t *testing.T) {
	db, clock := openClocked(t)
	ctx := testContext(t)
	a, err := db.AcquireLease(ctx, "owner", "A", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second) // expires_at == now counts as expired
	b, err := db.AcquireLease(ctx, "owner", "B", time.Minute)
	if err != nil || b.Token != a.Token+1 {
		t.Fatalf("takeover = %+v, %v", b, err)
	}
	e := wantCode(t, db.Fenced(ctx, a, func(*sql.Tx) error { t.Fatal("fn ran"); return nil }), errs.LeaseLost)
	if e.Data["currentHolder"] != "B" || e.Data["currentToken"] != b.Token {
		t.Fatalf("LEASE_LOST data = %v", e.Data)
	}
	if err := db.Fenced(ctx, b, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestLeaseInvalidParams(t *testing.T) {
	db, _ := openClocked(t)
	ctx := testContext(t)
	_, err := db.AcquireLease(ctx, "", "h", time.Second)
	wantCode(t, err, errs.InvalidParams)
	_, err = db.AcquireLease(ctx, "n", "", time.Second)
	wantCode(t, err, errs.InvalidParams)
	_, err = db.AcquireLease(ctx, "n", "h", 0)
	wantCode(t, err, errs.InvalidParams)
	_, err = db.RenewLease(ctx, Lease{Name: "n", Holder: "h"}, time.Second)
	wantCode(t, err, errs.InvalidParams)
	l, err := db.AcquireLease(ctx, "n", "h", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.RenewLease(ctx, l, -time.Second)
	wantCode(t, err, errs.InvalidParams)
	wantCode(t, db.ReleaseLease(ctx, Lease{}), errs.InvalidParams)
	wantCode(t, db.Fenced(ctx, Lease{Name: "n", Holder: "h"}, nil), errs.InvalidParams)
	_, _, err = db.ReadLease(ctx, "")
	wantCode(t, err, errs.InvalidParams)
	// Sub-millisecond TTLs round up rather than expiring at once.
	l, err = db.AcquireLease(ctx, "tiny", "h", time.Nanosecond)
	if err != nil || l.Expires.Sub(time.UnixMilli(0)) <= 0 {
		t.Fatalf("tiny ttl = %+v, %v", l, err)
	}
	if err := db.Fenced(ctx, l, func(*sql.Tx) error { return nil }); err != nil {
		t.Fatalf("a 1 ns TTL (rounded to 1 ms) should hold at the same instant: %v", err)
	}
}
