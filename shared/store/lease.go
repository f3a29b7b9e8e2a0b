package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Lease is one process's claim on a named role (scheduler leadership, the
// agentd runtime owner, a worker heartbeat). Token is the fencing token: it
// grows by one every time the lease changes hands, released or expired, and
// never goes back, so a write made under an older token can be refused.
type Lease struct {
	Name    string
	Holder  string
	Token   int64
	Expires time.Time
}

type leaseRow struct {
	found   bool
	holder  string
	token   int64
	expires int64 // unix ms; 0 when released
}

const leaseQuery = `SELECT holder, token, expires_at FROM leases WHERE name = ?`

func readLeaseRow(ctx context.Context, q querier, name string) (leaseRow, error) {
	return scanLeaseRow(q.QueryRowContext(ctx, leaseQuery, name))
}

func scanLeaseRow(row *sql.Row) (leaseRow, error) {
	r := leaseRow{found: true}
	err := row.Scan(&r.holder, &r.token, &r.expires)
	if errors.Is(err, sql.ErrNoRows) {
		return leaseRow{}, nil
	}
	return r, err
}

// held reports whether the row is held by someone at nowMs.
func (r leaseRow) held(nowMs int64) bool {
	return r.found && r.holder != "" && r.expires > nowMs
}

func (r leaseRow) lease(name string) Lease {
	l := Lease{Name: name, Holder: r.holder, Token: r.token}
	if r.expires != 0 {
		l.Expires = time.UnixMilli(r.expires)
	}
	return l
}

// ttlMs rounds ttl up to whole milliseconds.
func ttlMs(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func checkLeaseArgs(name, holder string, ttl time.Duration, needTTL bool) error {
	switch {
	case name == "":
		return errs.New(errs.InvalidParams, "a lease needs a name")
	case holder == "":
		return errs.New(errs.InvalidParams, "lease %q needs a holder", name)
	case needTTL && ttl <= 0:
		return errs.New(errs.InvalidParams, "lease %q needs a positive TTL, got %s", name, ttl)
	}
	return nil
}

func checkLease(l Lease) error {
	if err := checkLeaseArgs(l.Name, l.Holder, 0, false); err != nil {
		return err
	}
	if l.Token <= 0 {
		return errs.New(errs.InvalidParams, "lease %q has no fencing token; use the Lease AcquireLease returned", l.Name)
	}
	return nil
}

func leaseLost(l Lease, r leaseRow, why string) error {
	e := errs.New(errs.LeaseLost, "lease %q (token %d) is no longer held by %q: %s", l.Name, l.Token, l.Holder, why).
		With("lease", l.Name).With("token", l.Token)
	if r.holder != "" {
		e.With("currentHolder", r.holder).With("currentToken", r.token)
	}
	return e
}

func lostReason(l Lease, r leaseRow, nowMs int64) string {
	switch {
	case !r.found:
		return "no such lease"
	case r.holder == "":
		return "it was released"
	case r.token != l.Token || r.holder != l.Holder:
		return "another holder took it over"
	case r.expires <= nowMs:
		return "it expired"
	}
	return "it changed"
}

// AcquireLease takes the lease name for holder for ttl. A free, released or
// expired lease is taken with the next fencing token (1 for a new name); a
// lease holder already holds unexpired is extended to now+ttl and keeps its
// token; a lease another holder holds fails with LEASE_HELD (retryable), its
// Data carrying "holder", "expiresAt" and "retryAfterMs".
func (db *DB) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if err := checkLeaseArgs(name, holder, ttl, true); err != nil {
		return Lease{}, err
	}
	var out Lease
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.nowMs()
		exp := now + ttlMs(ttl)
		r, err := readLeaseRow(ctx, tx, name)
		if err != nil {
			return err
		}
		switch {
		case !r.found:
			_, err = tx.ExecContext(ctx,
				`INSERT INTO leases (name, holder, token, expires_at, acquired_at) VALUES (?, ?, 1, ?, ?)`,
				name, holder, exp, now)
			out = Lease{Name: name, Holder: holder, Token: 1, Expires: time.UnixMilli(exp)}
		case !r.held(now):
			_, err = tx.ExecContext(ctx,
				`UPDATE leases SET holder = ?, token = ?, expires_at = ?, acquired_at = ? WHERE name = ?`,
				holder, r.token+1, exp, now, name)
			out = Lease{Name: name, Holder: holder, Token: r.token + 1, Expires: time.UnixMilli(exp)}
		case r.holder == holder:
			_, err = tx.ExecContext(ctx,
				`UPDATE leases SET expires_at = ? WHERE name = ?`, exp, name)
			out = Lease{Name: name, Holder: holder, Token: r.token, Expires: time.UnixMilli(exp)}
		default:
			return errs.New(errs.LeaseHeld, "lease %q is held by %q until %s", name, r.holder, msTime(r.expires)).
				With("lease", name).With("holder", r.holder).
				With("expiresAt", msTime(r.expires)).With("retryAfterMs", r.expires-now)
		}
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	return out, nil
}

// RenewLease moves l's expiry to now+ttl. It succeeds while the lease still
// has l's holder and token, even if it has just expired, as long as nobody
// else took it in between; otherwise it fails with LEASE_LOST.
func (db *DB) RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error) {
	if err := checkLease(l); err != nil {
		return Lease{}, err
	}
	if ttl <= 0 {
		return Lease{}, errs.New(errs.InvalidParams, "lease %q needs a positive TTL, got %s", l.Name, ttl)
	}
	var out Lease
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.nowMs()
		r, err := readLeaseRow(ctx, tx, l.Name)
		if err != nil {
			return err
		}
		if !r.found || r.holder != l.Holder || r.token != l.Token {
			return leaseLost(l, r, lostReason(l, r, now))
		}
		exp := now + ttlMs(ttl)
		if _, err := tx.ExecContext(ctx, `UPDATE leases SET expires_at = ? WHERE name = ?`, exp, l.Name); err != nil {
			return err
		}
		out = Lease{Name: l.Name, Holder: l.Holder, Token: l.Token, Expires: time.UnixMilli(exp)}
		return nil
	})
	if err != nil {
		return Lease{}, err
	}
	return out, nil
}

// ReleaseLease gives l up. The row stays (holder ” and no expiry) so the
// next holder gets a higher token. If l was already lost (taken over,
// released, never existed) nothing changes and LEASE_LOST is returned.
func (db *DB) ReleaseLease(ctx context.Context, l Lease) error {
	if err := checkLease(l); err != nil {
		return err
	}
	return db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.nowMs()
		r, err := readLeaseRow(ctx, tx, l.Name)
		if err != nil {
			return err
		}
		if !r.found || r.holder != l.Holder || r.token != l.Token {
			return leaseLost(l, r, lostReason(l, r, now))
		}
		_, err = tx.ExecContext(ctx, `UPDATE leases SET holder = '', expires_at = 0 WHERE name = ?`, l.Name)
		return err
	})
}

// ReadLease returns the lease row for name; found is false if the name was
// never acquired. A released lease has Holder "" and a zero Expires but keeps
// its Token; an expired one still shows its last holder and a past Expires.
func (db *DB) ReadLease(ctx context.Context, name string) (Lease, bool, error) {
	if name == "" {
		return Lease{}, false, errs.New(errs.InvalidParams, "a lease needs a name")
	}
	r, err := readLeaseRow(ctx, db.sql, name)
	if err != nil {
		return Lease{}, false, db.classify(err, "reading lease "+name)
	}
	if !r.found {
		return Lease{}, false, nil
	}
	return r.lease(name), true, nil
}

// Fenced runs fn in one write transaction (BEGIN IMMEDIATE) that first checks
// that l is still held: same holder, same token and not expired by the clock.
// Otherwise it fails with LEASE_LOST and fn does not run. The fence check and
// fn's writes commit together or not at all (an error or panic from fn rolls
// back).
func (db *DB) Fenced(ctx context.Context, l Lease, fn func(*sql.Tx) error) error {
	if err := checkLease(l); err != nil {
		return err
	}
	return db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.nowMs()
		// Prepared once: agentd fences every journal transaction.
		var r leaseRow
		var err error
		if st := db.Prepared(ctx, leaseQuery); st != nil {
			r, err = scanLeaseRow(tx.StmtContext(ctx, st).QueryRowContext(ctx, l.Name))
		} else {
			r, err = readLeaseRow(ctx, tx, l.Name)
		}
		if err != nil {
			return err
		}
		if !r.held(now) || r.holder != l.Holder || r.token != l.Token {
			return leaseLost(l, r, lostReason(l, r, now))
		}
		return fn(tx)
	})
}
