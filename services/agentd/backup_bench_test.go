package agentd

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/store"
)

// BenchmarkBackupDuringTurns: an online backup (a snapshot and SQLite's
// backup API, as store/backup takes it) of a database of
// DEEPCODE_BENCH_BACKUP_MIB (default 1024) while turns run; goal: the turn
// round trip's p99 during the backup ≤ 2 × without, same run.
func BenchmarkBackupDuringTurns(b *testing.B) {
	mib := 1024
	if v, err := strconv.Atoi(os.Getenv("DEEPCODE_BENCH_BACKUP_MIB")); err == nil && v > 0 {
		mib = v
	}
	db, l, thread := benchDB(b)
	ctx := context.Background()
	// Fill: 1 MiB blobs (random, so the file really is that large).
	blob := make([]byte, 1<<20)
	var turnID string = newID("turn_")
	if _, err := db.SQL().Exec(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, created_at) VALUES (?, ?, 1, 'completed', 'start', 'k', 'script', 0)`, turnID, thread); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < mib; i++ {
		rand.Read(blob)
		item := newID("item_")
		if _, err := db.SQL().Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, 'commandExecution', 'completed', '{}', 0, 0)`, item, thread, turnID); err != nil {
			b.Fatal(err)
		}
		if _, err := db.SQL().Exec(`INSERT INTO item_blobs (item_id, name, data, created_at) VALUES (?, 'output', ?, 0)`, item, blob); err != nil {
			b.Fatal(err)
		}
	}
	j := newJournal(db, func() store.Lease { return l }, nil, nil, slog.New(slog.DiscardHandler))
	j.transcripts = newTranscripts(filepath.Join(b.TempDir(), "sessions"), slog.New(slog.DiscardHandler))
	go j.run()
	defer j.close()
	item := api.ItemPayload{Item: api.Item{ID: "item_aaaaaaaaaaaaaaaa", TurnID: "turn_aaaaaaaaaaaaaaaa", Kind: KindAgentMessage, Status: "completed", Payload: []byte(`{"text":"done"}`)}}
	turn := func() time.Duration {
		start := time.Now()
		for _, typ := range []string{EventTurnStarted, EventItemCompleted, EventTurnCompleted} {
			var payload any = item
			if typ != EventItemCompleted {
				payload = api.TurnPayload{Turn: api.Turn{ID: "turn_aaaaaaaaaaaaaaaa", Status: StatusCompleted}}
			}
			if err := j.do(ctx, func(w *txw) error { _, err := w.Append(thread, typ, payload); return err }); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	p99 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)*99/100]
	}
	var without, during []time.Duration
	var backupTime time.Duration
	for i := 0; b.Loop(); i++ {
		without = without[:0]
		for range 500 {
			without = append(without, turn())
			time.Sleep(2 * time.Millisecond)
		}
		done := make(chan error, 1)
		dst := filepath.Join(b.TempDir(), fmt.Sprintf("backup-%d.db", i))
		start := time.Now()
		go func() {
			snap, err := db.BeginSnapshot(ctx)
			if err != nil {
				done <- err
				return
			}
			defer snap.Close()
			done <- snap.BackupTo(ctx, dst, nil)
		}()
		during = during[:0]
	wait:
		for {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				break wait
			default:
				during = append(during, turn())
				time.Sleep(2 * time.Millisecond)
			}
		}
		backupTime = time.Since(start)
		os.Remove(dst)
	}
	if len(during) < 20 {
		b.Fatalf("only %d turns ran during the backup", len(during))
	}
	b.ReportMetric(float64(mib)/backupTime.Seconds(), "MiB/s-backup")
	b.ReportMetric(float64(p99(without).Microseconds()), "µs-p99-without")
	b.ReportMetric(float64(p99(during).Microseconds()), "µs-p99-during")
	b.ReportMetric(float64(p99(during))/float64(p99(without)), "p99-ratio")
	b.ReportMetric(float64(len(during)), "turns-during")
}
