package store

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// rawTxCost measures the raw limit the lease operations sit on: one
// BEGIN IMMEDIATE / single-row UPDATE / COMMIT on the same file, through
// database/sql, without any lease logic.
func rawTxCost(b *testing.B, db *DB) time.Duration {
	b.Helper()
	ctx := context.Background()
	if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, n INTEGER NOT NULL) STRICT;
		INSERT OR IGNORE INTO raw VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	const warm, n = 200, 2000
	var start time.Time
	for i := 0; i < warm+n; i++ {
		if i == warm {
			start = time.Now()
		}
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE raw SET n = n + 1 WHERE id = 1`); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / n
}

// reportRatio reports the op's cost as a multiple of txPerOp raw
// transactions. The raw limit is measured before and after the loop and the
// faster run kept, since this shared machine is noisy.
func reportRatio(b *testing.B, db *DB, rawBefore time.Duration, txPerOp int) {
	if b.N == 0 {
		return
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	raw := min(rawBefore, rawTxCost(b, db))
	b.ReportMetric(float64(raw.Nanoseconds()), "raw-tx-ns")
	b.ReportMetric(perOp/(float64(raw.Nanoseconds())*float64(txPerOp)), "x-raw-tx")
}

// BenchmarkLeaseAcquireRenew is one AcquireLease (same holder: extend) plus
// one RenewLease per op: two IMMEDIATE transactions.
func BenchmarkLeaseAcquireRenew(b *testing.B) {
	db := openTest(b, filepath.Join(b.TempDir(), "bench.sqlite3"))
	ctx := context.Background()
	raw := rawTxCost(b, db)
	for b.Loop() {
		l, err := db.AcquireLease(ctx, "bench", "holder", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.RenewLease(ctx, l, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	reportRatio(b, db, raw, 2)
}

// BenchmarkFencedWrite is one fenced single-row UPDATE per op: the fence
// check and the write in one IMMEDIATE transaction.
func BenchmarkFencedWrite(b *testing.B) {
	db := openTest(b, filepath.Join(b.TempDir(), "bench.sqlite3"))
	ctx := context.Background()
	raw := rawTxCost(b, db)
	l, err := db.AcquireLease(ctx, "bench", "holder", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	write := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE raw SET n = n + 1 WHERE id = 1`)
		return err
	}
	for b.Loop() {
		if err := db.Fenced(ctx, l, write); err != nil {
			b.Fatal(err)
		}
	}
	reportRatio(b, db, raw, 1)
}
