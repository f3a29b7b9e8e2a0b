//go:build linux

package supervisor_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// median reports the median and 90th percentile of ds as metrics.
func reportPercentiles(b *testing.B, ds []time.Duration, unit string) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2])/1e6, "ms-median-"+unit)
	b.ReportMetric(float64(ds[len(ds)*9/10])/1e6, "ms-p90-"+unit)
}

// rawSpawn measures the floor every CLI command pays: starting the deepcode
// binary at all (deepcode --version), in the same run.
func rawSpawn(b *testing.B, env *testkit.Env) {
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		if err := env.Command(context.Background(), "deepcode", "--version").Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds, "raw-spawn")
	emptySpawn(b)
}

// emptySpawn measures the machine's floor under that: starting a static Go
// program that prints one line and exits. On a virtual machine where a page
// fault is expensive, this floor alone can be a large part of a goal.
func emptySpawn(b *testing.B) {
	bin := buildProgram(b, "empty")
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		if err := exec.Command(bin).Run(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds, "empty-go-spawn")
}

// buildProgram builds testdata/<name>/main.go (standard library only),
// static and stripped as `make build` builds deepcode's, and returns the
// executable's path.
func buildProgram(b *testing.B, name string) string {
	src, err := filepath.Abs(filepath.Join("testdata", name, "main.go"))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, src)
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// bareStatusSpawn measures testdata/barestatus against the running instance:
// the floor of the status goal on this machine, for any program written in
// Go; and testdata/barestatusverified, which also makes the server prove
// it knows the token before sending it, as every deepcode client must
// (bare-verified-status-spawn).
func bareStatusSpawn(b *testing.B, env *testkit.Env) {
	spawnBare(b, env, "barestatus", "bare-status-spawn")
	spawnBare(b, env, "barestatusverified", "bare-verified-status-spawn")
}

func spawnBare(b *testing.B, env *testkit.Env, program, metric string) {
	bin := buildProgram(b, program)
	l := env.Layout("")
	var ds []time.Duration
	for i := 0; i < 50; i++ {
		var out bytes.Buffer
		cmd := exec.Command(bin, l.InstanceJSON(), l.Token())
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("bare status client: %v\n%s", err, out.Bytes())
		}
		ds = append(ds, time.Since(t0))
		if !bytes.Contains(out.Bytes(), []byte(`"instanceId"`)) {
			b.Fatalf("bare status client printed no status: %s", out.Bytes())
		}
	}
	reportPercentiles(b, ds, metric)
}

// BenchmarkServiceStart: `deepcode service start` from nothing running to
// an authenticated ready answer. Goal: median ≤ 150 ms.
func BenchmarkServiceStart(b *testing.B) {
	env := testkit.NewEnv(b, testkit.Binaries(b))
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < max(b.N, 15); i++ {
		t0 := time.Now()
		env.MustRun("service", "start", "--port", "0")
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		env.MustRun("service", "stop", "--drain=false")
		b.StartTimer()
	}
	reportPercentiles(b, ds, "start")
	rawSpawn(b, env)
}

// BenchmarkServiceStatus: `deepcode service status --json` against a
// running instance. Goal: median ≤ 10 ms. In the same run: the deepcode
// binary's start alone (raw-spawn), a Go program that does nothing
// (empty-go-spawn), and one that does nothing but the status exchange
// (bare-status-spawn), also with the identity check
// (bare-verified-status-spawn).
func BenchmarkServiceStatus(b *testing.B) {
	env := testkit.NewEnv(b, testkit.Binaries(b))
	env.MustRun("service", "start", "--port", "0")
	defer env.Run("service", "stop", "--drain=false")
	var ds []time.Duration
	b.ResetTimer()
	for i := 0; i < max(b.N, 50); i++ {
		t0 := time.Now()
		env.MustRun("service", "status", "--json")
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds, "status")
	rawSpawn(b, env)
	bareStatusSpawn(b, env)
}

// BenchmarkIdle: resident memory of all the instance's processes together
// (goal ≤ 40 MiB) and the CPU time they use in 10 idle seconds (goal
// ≤ 20 ms: no polling loops).
func BenchmarkIdle(b *testing.B) {
	env := testkit.NewEnv(b, testkit.Binaries(b))
	env.MustRun("service", "start", "--port", "0")
	defer env.Run("service", "stop", "--drain=false")
	time.Sleep(2 * time.Second) // let start-up work finish
	pids := env.Processes()
	cpu0 := cpuTicks(b, pids)
	b.ResetTimer()
	time.Sleep(10 * time.Second)
	b.StopTimer()
	cpu1 := cpuTicks(b, pids)
	rss := 0
	for _, p := range pids {
		rss += rssKiB(b, p)
	}
	ticksPerSec := 100.0 // USER_HZ on Linux
	b.ReportMetric(float64(rss)/1024, "idle-rss-MiB")
	b.ReportMetric(float64(cpu1-cpu0)*1000/ticksPerSec, "idle-cpu-ms/10s")
	b.ReportMetric(float64(len(pids)), "processes")
}

func cpuTicks(b *testing.B, pids []int) int {
	total := 0
	for _, p := range pids {
		st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "stat"))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
		ut, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		total += ut + stime
	}
	return total
}

func rssKiB(b *testing.B, pid int) int {
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	return 0
}
