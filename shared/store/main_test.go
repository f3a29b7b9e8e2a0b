package store

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestMain doubles as the entry point of helper processes: the multi-process
// tests re-execute this test binary with helperEnv set.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	goleak.VerifyTestMain(m)
}

// fakeClock is an injectable clock for lease tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // guard only
	t.Cleanup(cancel)
	return ctx
}

func openTest(t testing.TB, path string, opts ...Option) *DB {
	t.Helper()
	db, err := Open(testContext(t), path, opts...)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

func wantCode(t testing.TB, err error, code errs.Code) *errs.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s", code)
	}
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("got %T %v, want *errs.Error %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("got code %s (%v), want %s", e.Code, err, code)
	}
	if e.Retryable != code.Retryable() {
		t.Fatalf("%s: Retryable = %v, want %v", code, e.Retryable, code.Retryable())
	}
	return e
}

// rawDB opens path with the driver directly, bypassing Open's checks.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	sqldb, err := sql.Open(driverName, dsn(path, defaultBusyTimeout, wantJournal()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqldb.Close() })
	return sqldb
}

var errBoom = errors.New("boom")
