package store

// Multi-process tests: the test binary re-executes itself (TestMain sees
// helperEnv) so that several real OS processes share one SQLite file.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

const (
	helperEnv     = "DEEPCODE_STORE_HELPER"
	helperArgsEnv = "DEEPCODE_STORE_HELPER_ARGS"
)

type helperArgs struct {
	DB         string
	Lease      string
	Holder     string
	TTL        time.Duration
	Iterations int
	DelayEvery int           // loop: every DelayEvery-th iteration takes ShortTTL and outlives it before writing
	ShortTTL   time.Duration // loop: TTL of the delayed iterations
}

// helperMsg is one JSON line a helper prints on stdout.
type helperMsg struct {
	Ready   bool   `json:",omitempty"`
	Error   string `json:",omitempty"`
	Applied int    `json:",omitempty"`
	Version int    `json:",omitempty"`
	Lease   *Lease `json:",omitempty"`
	Fenced  int    `json:",omitempty"`
	Lost    int    `json:",omitempty"`
	InTx    bool   `json:",omitempty"`
}

func runHelper(mode string) int {
	var a helperArgs
	if err := json.Unmarshal([]byte(os.Getenv(helperArgsEnv)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "helper args:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // guard
	defer cancel()
	enc := json.NewEncoder(os.Stdout)
	stdin := bufio.NewReader(os.Stdin)
	fail := func(err error) int {
		enc.Encode(helperMsg{Error: err.Error()})
		return 1
	}
	waitGo := func() error {
		if err := enc.Encode(helperMsg{Ready: true}); err != nil {
			return err
		}
		_, err := stdin.ReadString('\n')
		return err
	}

	switch mode {
	case "open":
		if err := waitGo(); err != nil {
			return fail(err)
		}
		db, err := Open(ctx, a.DB)
		if err != nil {
			return fail(err)
		}
		defer db.Close()
		enc.Encode(helperMsg{Applied: db.applied, Version: db.SchemaVersion()})
		return 0

	case "loop":
		db, err := Open(ctx, a.DB)
		if err != nil {
			return fail(err)
		}
		defer db.Close()
		if err := waitGo(); err != nil {
			return fail(err)
		}
		var fenced, lost int
		for i := 1; i <= a.Iterations; i++ {
			delayed := a.DelayEvery > 0 && i%a.DelayEvery == 0
			ttl := a.TTL
			if delayed {
				ttl = a.ShortTTL
			}
			l, err := acquireRetrying(ctx, db, a.Lease, a.Holder, ttl)
			if err != nil {
				return fail(err)
			}
			if delayed {
				// Outlive the lease (workload, not an assertion): others
				// may take over meanwhile, and the fence must refuse this
				// write by the clock or by token.
				time.Sleep(ttl + 5*time.Millisecond)
			}
			err = db.Fenced(ctx, l, func(tx *sql.Tx) error {
				var n int64
				if err := tx.QueryRowContext(ctx, `UPDATE counter SET n = n + 1 RETURNING n`).Scan(&n); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO fence_log (token, holder, n) VALUES (?, ?, ?)`, l.Token, l.Holder, n)
				return err
			})
			switch {
			case err == nil:
				fenced++
			case errs.Is(err, errs.LeaseLost):
				lost++
			default:
				return fail(err)
			}
			if err := db.ReleaseLease(ctx, l); err != nil && !errs.Is(err, errs.LeaseLost) {
				return fail(err)
			}
		}
		enc.Encode(helperMsg{Fenced: fenced, Lost: lost})
		return 0

	case "hold":
		// Take the lease, then die (SIGKILL from the test) in the middle of
		// a write transaction.
		db, err := Open(ctx, a.DB)
		if err != nil {
			return fail(err)
		}
		l, err := db.AcquireLease(ctx, a.Lease, a.Holder, a.TTL)
		if err != nil {
			return fail(err)
		}
		enc.Encode(helperMsg{Lease: &l})
		err = db.Fenced(ctx, l, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO crash_probe VALUES ('uncommitted')`); err != nil {
				return err
			}
			enc.Encode(helperMsg{InTx: true})
			_, err := stdin.ReadString('\n') // blocks until killed
			return err
		})
		return fail(fmt.Errorf("hold helper was not killed: %v", err))

	case "acquire":
		db, err := Open(ctx, a.DB)
		if err != nil {
			return fail(err)
		}
		defer db.Close()
		l, err := acquireRetrying(ctx, db, a.Lease, a.Holder, a.TTL)
		if err != nil {
			return fail(err)
		}
		enc.Encode(helperMsg{Lease: &l})
		return 0
	}
	return fail(fmt.Errorf("unknown helper mode %q", mode))
}

// acquireRetrying waits out LEASE_HELD, sleeping until the holder's expiry
// (capped so a release is noticed soon).
func acquireRetrying(ctx context.Context, db *DB, name, holder string, ttl time.Duration) (Lease, error) {
	for {
		l, err := db.AcquireLease(ctx, name, holder, ttl)
		if !errs.Is(err, errs.LeaseHeld) {
			return l, err
		}
		wait := time.Millisecond
		if e, _ := errs.As(err); e != nil {
			if ms, ok := e.Data["retryAfterMs"].(int64); ok && ms > 0 && ms < 5 {
				wait = time.Duration(ms) * time.Millisecond
			}
			if ms, ok := e.Data["retryAfterMs"].(int64); ok && ms >= 5 {
				wait = 5 * time.Millisecond
			}
		}
		select {
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the exec copier and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running helper process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan helperMsg
	stderr *syncBuffer
	exited chan error
}

func startHelper(t *testing.T, name, mode string, a helperArgs) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // guard
	args, _ := json.Marshal(a)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperArgsEnv+"="+string(args))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, stdin: stdin, lines: make(chan helperMsg, 16),
		stderr: new(syncBuffer), exited: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m helperMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = helperMsg{Error: "unparsable helper output: " + sc.Text()}
			}
			p.lines <- m
		}
	}()
	go func() {
		<-readDone // Wait closes stdout; read everything first
		p.exited <- cmd.Wait()
		cancel()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
	})
	return p
}

// next returns the helper's next message, failing the test on an error
// message or if the helper exits first.
func (p *proc) next() helperMsg {
	p.t.Helper()
	m, ok := <-p.lines
	if !ok {
		p.t.Fatalf("%s exited early; stderr:\n%s", p.name, p.stderr)
	}
	if m.Error != "" {
		p.t.Fatalf("%s: %s; stderr:\n%s", p.name, m.Error, p.stderr)
	}
	return m
}

func (p *proc) wait() {
	p.t.Helper()
	if err := <-p.exited; err != nil {
		p.t.Fatalf("%s: %v; stderr:\n%s", p.name, err, p.stderr)
	}
	p.exited <- nil
}

// (a) N processes open the same fresh file at once: every migration is
// applied exactly once in total and nobody errors.
func TestProcessesOpenFreshFileConcurrently(t *testing.T) {
	const n = 4
	for round := 0; round < 3; round++ {
		path := filepath.Join(t.TempDir(), "fresh.sqlite3")
		procs := make([]*proc, n)
		for i := range procs {
			procs[i] = startHelper(t, fmt.Sprintf("opener %d", i), "open", helperArgs{DB: path})
		}
		for _, p := range procs {
			if !p.next().Ready {
				t.Fatalf("%s: no ready", p.name)
			}
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatal("the file exists before anyone opened it")
		}
		for _, p := range procs {
			if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
		applied := 0
		for _, p := range procs {
			m := p.next()
			if m.Version != LatestSchemaVersion() {
				t.Fatalf("%s: version %d", p.name, m.Version)
			}
			applied += m.Applied
			p.wait()
		}
		if applied != LatestSchemaVersion() {
			t.Fatalf("round %d: %d migrations applied across processes, want %d", round, applied, LatestSchemaVersion())
		}
		db := openTest(t, path)
		if db.applied != 0 || db.SchemaVersion() != LatestSchemaVersion() {
			t.Fatalf("after the race: applied %d version %d", db.applied, db.SchemaVersion())
		}
		if fi, err := os.Stat(path); err != nil || (isUnixLike() && fi.Mode().Perm() != 0o600) {
			t.Fatalf("file mode after the race: %v, %v", fi, err)
		}
	}
}

// (b) Processes loop acquire → fenced increment → release. The counter equals
// the fenced writes, and the tokens logged inside the fenced transactions,
// in commit order, strictly increase: no two holders ever overlapped.
func TestProcessesFencedCounter(t *testing.T) {
	const (
		nProcs     = 3
		iterations = 40
		delayEvery = 10
	)
	path := filepath.Join(t.TempDir(), "counter.sqlite3")
	db := openTest(t, path)
	ctx := testContext(t)
	if _, err := db.SQL().ExecContext(ctx, `
		CREATE TABLE counter (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL) STRICT;
		INSERT INTO counter VALUES (1, 0);
		CREATE TABLE fence_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, holder TEXT NOT NULL, n INTEGER NOT NULL) STRICT;
	`); err != nil {
		t.Fatal(err)
	}

	procs := make([]*proc, nProcs)
	for i := range procs {
		procs[i] = startHelper(t, fmt.Sprintf("worker %d", i), "loop", helperArgs{
			DB: path, Lease: "counter-writer", Holder: fmt.Sprintf("worker-%d", i),
			TTL: 5 * time.Second, ShortTTL: 20 * time.Millisecond,
			Iterations: iterations, DelayEvery: delayEvery,
		})
	}
	for _, p := range procs {
		if !p.next().Ready {
			t.Fatalf("%s: no ready", p.name)
		}
	}
	for _, p := range procs {
		io.WriteString(p.stdin, "go\n")
	}
	totalFenced := 0
	for _, p := range procs {
		m := p.next()
		p.wait()
		// Delayed iterations outlived their lease, so the fence refused
		// them; the others wrote (unless the machine stalled for a whole
		// TTL, which the fence would refuse too).
		if m.Lost < iterations/delayEvery || m.Fenced+m.Lost != iterations || m.Fenced == 0 {
			t.Fatalf("%s: fenced %d lost %d", p.name, m.Fenced, m.Lost)
		}
		totalFenced += m.Fenced
	}

	var n int
	if err := db.SQL().QueryRowContext(ctx, `SELECT n FROM counter`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != totalFenced {
		t.Fatalf("counter = %d, fenced writes = %d", n, totalFenced)
	}
	rows, err := db.SQL().QueryContext(ctx, `SELECT token, holder, n FROM fence_log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	i := 0
	holders := map[string]int{}
	for rows.Next() {
		var token, rn int64
		var holder string
		if err := rows.Scan(&token, &holder, &rn); err != nil {
			t.Fatal(err)
		}
		i++
		if token <= last {
			t.Fatalf("fence_log row %d: token %d after %d (overlapping holders)", i, token, last)
		}
		if rn != int64(i) {
			t.Fatalf("fence_log row %d saw counter %d", i, rn)
		}
		last = token
		holders[holder]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != totalFenced || len(holders) != nProcs {
		t.Fatalf("fence_log has %d rows from %d holders, want %d from %d", i, len(holders), totalFenced, nProcs)
	}
	l, ok, err := db.ReadLease(ctx, "counter-writer")
	if err != nil || !ok || l.Token < last || l.Token < nProcs*iterations {
		t.Fatalf("final lease %+v, %v, %v (last logged token %d)", l, ok, err, last)
	}
}

// (c) A holder is SIGKILLed mid-transaction. After its TTL another process
// acquires with a higher token; the dead holder's lease is refused with
// LEASE_LOST and its uncommitted write is gone.
func TestProcessKilledHolderIsFencedOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.sqlite3")
	db := openTest(t, path)
	ctx := testContext(t)
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE crash_probe (v TEXT NOT NULL) STRICT`); err != nil {
		t.Fatal(err)
	}
	const ttl = 300 * time.Millisecond

	dead := startHelper(t, "doomed holder", "hold", helperArgs{DB: path, Lease: "runtime-owner", Holder: "doomed", TTL: ttl})
	deadLease := *dead.next().Lease
	if !dead.next().InTx {
		t.Fatal("holder did not report its open transaction")
	}
	if err := dead.cmd.Process.Kill(); err != nil { // SIGKILL on Unix
		t.Fatal(err)
	}
	if err := <-dead.exited; err == nil || !strings.Contains(err.Error(), "killed") && isUnixLike() {
		t.Fatalf("doomed holder exit: %v", err)
	}
	dead.exited <- nil

	// Until the TTL passes, the dead holder still owns the lease.
	if l, ok, err := db.ReadLease(ctx, "runtime-owner"); err != nil || !ok || l.Holder != "doomed" || l.Token != deadLease.Token {
		t.Fatalf("lease after kill = %+v, %v, %v", l, ok, err)
	}

	next := startHelper(t, "successor", "acquire", helperArgs{DB: path, Lease: "runtime-owner", Holder: "successor", TTL: time.Minute})
	newLease := *next.next().Lease
	next.wait()
	if newLease.Holder != "successor" || newLease.Token <= deadLease.Token {
		t.Fatalf("successor lease %+v after dead %+v", newLease, deadLease)
	}
	if acquired := newLease.Expires.Add(-time.Minute); acquired.Before(deadLease.Expires) {
		t.Fatalf("successor acquired before the dead lease expired: %v vs %v", newLease.Expires, deadLease.Expires)
	}

	ran := false
	wantCode(t, db.Fenced(ctx, deadLease, func(*sql.Tx) error { ran = true; return nil }), errs.LeaseLost)
	if ran {
		t.Fatal("fenced fn ran under the dead holder's lease")
	}
	_, err := db.RenewLease(ctx, deadLease, time.Minute)
	wantCode(t, err, errs.LeaseLost)
	wantCode(t, db.ReleaseLease(ctx, deadLease), errs.LeaseLost)

	// The successor's lease works from any process; the dead write is gone.
	if err := db.Fenced(ctx, newLease, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM crash_probe`).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return errors.New("the killed process's uncommitted write is visible")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
