package scheduler_test

import (
	"fmt"
	"github.com/deepcode-dev/deepcode/shared/api"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/scheduler"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// cpuTime is a process's CPU time so far (Linux: the sum of its threads'
// on-CPU nanoseconds from schedstat, exact rather than in clock ticks).
func cpuTime(b *testing.B, pid int) time.Duration {
	b.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		b.Fatalf("schedstat of %d: %v", pid, err)
	}
	var total int64
	for _, p := range tasks {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(raw)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += n
		}
	}
	return time.Duration(total)
}

func rssMiB(pid int) float64 {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func median(ds []time.Duration) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}

// BenchmarkScheduler10k: 10,000 enabled automations. Goals: the scheduler
// process's idle CPU over 10 s ≤ 1 % of one core; with 100 automations due
// at the same second, the median delay from the due time to the submission
// (agentd's answer to turn/enqueue recorded) ≤ 100 ms. The raw limit in the
// same run: 100 concurrent turn/enqueue calls made straight to agentd, timed
// from their start to each answer.
func BenchmarkScheduler10k(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	env := startInstance(b)
	q := db(b, env)
	ws := b.TempDir()
	const total, due, workers = 10_000, 100, 16
	conns := make([]*client, workers)
	for i := range conns {
		conns[i] = dial(b, env)
	}

	// 9,900 automations that do not fire during the run (1 January).
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total-due; i += workers {
				conns[w].create(map[string]any{"name": fmt.Sprintf("idle %d", i), "cron": "0 0 0 1 1 *", "timeZone": "UTC",
					"workspace": ws, "profile": "script", "prompt": "say hi", "trust": true})
			}
		}()
	}
	wg.Wait()
	createRate := float64(total-due) / time.Since(t0).Seconds()

	// 100 that all fall due at the same second, a little later.
	at := time.Now().Add(20 * time.Second).Truncate(time.Second).UTC()
	expr := fmt.Sprintf("%d %d %d %d %d *", at.Second(), at.Minute(), at.Hour(), at.Day(), int(at.Month()))
	ids := make([]string, due)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < due; i += workers {
				ids[i] = conns[w].create(map[string]any{"name": fmt.Sprintf("due %d", i), "cron": expr, "timeZone": "UTC",
					"workspace": ws, "profile": "script", "prompt": "say hi", "trust": true}).ID
			}
		}()
	}
	wg.Wait()
	if time.Until(at) < 12*time.Second {
		b.Fatalf("creating took too long: the due time %s is too close", at)
	}
	pid, _ := leader(b, q)
	if pid == 0 {
		b.Fatal("no scheduler leader")
	}

	// Idle: 10 s with nothing due, no client calls.
	time.Sleep(3 * time.Second)
	b.ResetTimer()
	c0, w0 := cpuTime(b, pid), time.Now()
	time.Sleep(10 * time.Second)
	idle := float64(cpuTime(b, pid)-c0) / float64(time.Since(w0)) * 100
	rss := rssMiB(pid)

	// 100 due at once.
	testkit.WaitFor(b, time.Until(at)+60*time.Second, "the due runs", func() bool {
		var n int
		_ = q.QueryRow(`SELECT count(*) FROM automation_runs WHERE status = 'submitted' AND scheduled_at = ?`, at.UnixMilli()).Scan(&n)
		return n == due
	})
	b.StopTimer()
	rows, err := q.Query(`SELECT created_at, updated_at FROM automation_runs WHERE scheduled_at = ? AND status = 'submitted'`, at.UnixMilli())
	if err != nil {
		b.Fatal(err)
	}
	var timerLate, submitDelay []time.Duration
	for rows.Next() {
		var created, updated int64
		if err := rows.Scan(&created, &updated); err != nil {
			b.Fatal(err)
		}
		timerLate = append(timerLate, time.Duration(created-at.UnixMilli())*time.Millisecond)
		submitDelay = append(submitDelay, time.Duration(updated-at.UnixMilli())*time.Millisecond)
	}
	rows.Close()
	if len(submitDelay) != due {
		b.Fatalf("%d submitted runs, want %d", len(submitDelay), due)
	}
	maxSubmit := slicesMax(submitDelay)

	// Raw limit: 100 concurrent turn/enqueue calls straight to agentd, on
	// the same 100 threads.
	agent := make([]*client, workers)
	for i := range agent {
		agent[i] = dialPath(b, env.Layout("").Socket(paths.AgentdSocket), "/rpc")
	}
	threads := make([]string, due)
	for i, id := range ids {
		var read struct{ Automation scheduler.Automation }
		conns[0].must(api.MethodAutomationRead, map[string]any{"automationId": id}, &read)
		threads[i] = read.Automation.ThreadID
	}
	raw := make([]time.Duration, due)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < due; i += workers {
				agent[w].must("turn/enqueue", map[string]any{"threadId": threads[i], "messageId": fmt.Sprintf("raw-%d", i), "input": map[string]string{"text": "say hi"}}, nil)
				raw[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()

	b.ReportMetric(idle, "%cpu-idle-10k")
	b.ReportMetric(rss, "MiB-rss-10k")
	b.ReportMetric(float64(median(timerLate))/1e6, "ms-p50-due-to-evaluation")
	b.ReportMetric(float64(median(submitDelay))/1e6, "ms-p50-due-to-submitted")
	b.ReportMetric(float64(maxSubmit)/1e6, "ms-max-due-to-submitted")
	b.ReportMetric(float64(median(raw))/1e6, "ms-p50-raw-enqueue-100")
	b.ReportMetric(createRate, "creates/s")
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
