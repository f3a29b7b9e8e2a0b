//go:build linux

package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestStatusDuringStopStart: `service status --json` taken over and over
// while another goroutine stops and starts the instance always exits 0
// (an instance exists: starting, running, draining or stopping) or 3 (none),
// with the status object on stdout whose phase agrees with the exit status
// — never 1 with SERVICE_UNAVAILABLE from a manager that is going away.
func TestStatusDuringStopStart(t *testing.T) {
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.MustRun("service", "start", "--port", "0")

	const cycles = 6
	done := make(chan struct{})
	var cycleErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < cycles; i++ {
			for _, args := range [][]string{{"service", "stop"}, {"service", "start", "--port", "0"}} {
				if r := env.Run(args...); r.Code != 0 {
					cycleErr = fmt.Errorf("deepcode %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
					return
				}
			}
		}
	}()

	// Three watchers at once, so that calls land in every instant of the
	// cycles (the manager closing, the discovery files going and coming).
	const watchers = 3
	var mu sync.Mutex
	phases := map[string]int{}
	calls := 0
	var wwg sync.WaitGroup
	for w := 0; w < watchers; w++ {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				r := env.Run("service", "status", "--json")
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				if msg := checkStatusResult(r); msg != "" {
					t.Errorf("status call %d: %s\nstdout: %s\nstderr: %s", n, msg, r.Stdout, r.Stderr)
					return
				}
				var st struct{ Phase string }
				_ = json.Unmarshal([]byte(r.Stdout), &st)
				mu.Lock()
				phases[st.Phase]++
				mu.Unlock()
			}
		}()
	}
	wwg.Wait()
	wg.Wait()
	if cycleErr != nil {
		t.Fatal(cycleErr)
	}
	t.Logf("%d status calls during %d stop/start cycles: %v", calls, cycles, phases)
	if r := env.Run("service", "status", "--json"); r.Code != 0 {
		t.Fatalf("after the last start, status exits %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// checkStatusResult says what is wrong with one `service status --json`
// result ("" when nothing is): the exit status is 0 with a phase of an
// existing instance or 3 with "stopped", stdout is the status object, and
// nothing is on stderr.
func checkStatusResult(r testkit.Result) string {
	var st struct {
		Running  *bool                        `json:"running"`
		Phase    string                       `json:"phase"`
		Services map[string]mgmt.ServiceState `json:"services"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || st.Running == nil || st.Phase == "" || st.Services == nil {
		return fmt.Sprintf("exit %d, and stdout is not the status object (%v)", r.Code, err)
	}
	switch r.Code {
	case 0:
		if !*st.Running || st.Phase == mgmt.PhaseStopped {
			return fmt.Sprintf("exit 0 with running %v, phase %q", *st.Running, st.Phase)
		}
	case 3:
		if *st.Running || st.Phase != mgmt.PhaseStopped {
			return fmt.Sprintf("exit 3 with running %v, phase %q", *st.Running, st.Phase)
		}
	default:
		return fmt.Sprintf("exit %d, want 0 or 3", r.Code)
	}
	if strings.TrimSpace(r.Stderr) != "" {
		return "a message on stderr, which the status contract does not have"
	}
	return ""
}
