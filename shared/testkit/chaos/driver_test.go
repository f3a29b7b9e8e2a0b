//go:build linux

package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// cli runs the deepcode CLI with a bound: a command that does not answer in
// time is reported as such (code -1, timedOut), with what it printed.
func (s *suite) cli(bound time.Duration, args ...string) (r testkit.Result, timedOut bool) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := s.env.Command(ctx, "deepcode", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r = testkit.Result{Stdout: out.String(), Stderr: errb.String()}
	if err != nil {
		r.Code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) && ctx.Err() == nil {
			r.Code = ee.ExitCode()
		}
	}
	return r, ctx.Err() != nil
}

// statusOut is what `service status --json` prints.
type statusOut struct {
	Running bool `json:"running"`
	mgmt.Status
}

// status runs `service status --json`; ok is false unless it answered
// with a status (exit 0 or 3).
func (s *suite) status() (statusOut, int, bool) {
	r, _ := s.cli(30*time.Second, "service", "status", "--json")
	var st statusOut
	if r.Code != 0 && r.Code != 3 {
		return st, r.Code, false
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		return st, r.Code, false
	}
	return st, r.Code, true
}

// servicesUp: the processes the driver may kill all run.
var servicesUp = []string{"manager", "gateway", "scheduler", "agentd", "termhost"}

// waitHealthy waits until status reports a ready instance with every
// service running (the workload starts the on-demand ones).
func (s *suite) waitHealthy(bound time.Duration) (statusOut, error) {
	deadline := time.Now().Add(bound)
	var last string
	for time.Now().Before(deadline) {
		st, code, ok := s.status()
		switch {
		case !ok:
			last = fmt.Sprintf("status exit %d", code)
		case !st.Running || !st.Ready || st.Phase != mgmt.PhaseRunning:
			last = fmt.Sprintf("running %v ready %v phase %s", st.Running, st.Ready, st.Phase)
		default:
			missing := ""
			for _, name := range servicesUp {
				if sv := st.Services[name]; sv.State != "running" || sv.PID == 0 {
					missing += fmt.Sprintf(" %s=%s", name, sv.State)
				}
			}
			if missing == "" {
				return st, nil
			}
			last = "not running:" + missing
		}
		time.Sleep(200 * time.Millisecond)
	}
	return statusOut{}, fmt.Errorf("not healthy after %s: %s", bound, last)
}

// runTrial injects one fault and checks the invariants after it.
func (s *suite) runTrial(tr *trial) {
	s.mu.Lock()
	s.current = tr.n
	s.mu.Unlock()
	ctx := context.Background()
	before := len(s.rec.all())
	defer func() { tr.accepts = len(s.rec.all()) - before }()

	st, err := s.waitHealthy(guard)
	if err != nil {
		s.violate(tr.n, invRecovers, "before the fault: %v", err)
		tr.aborted = true
		return
	}
	s.gate.resume()
	s.startLong(ctx, tr)
	// A keyed manual run of the automation, besides its schedule.
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		l := newLink(s.layout, "manual")
		defer l.close()
		s.manualRun(ctx, l, fmt.Sprintf("manual-%02d", tr.n))
	}()

	tr.delay = 300*time.Millisecond + time.Duration(s.delays.Int64N(int64(3700*time.Millisecond)))
	time.Sleep(tr.delay)
	// Fresh pids: the workload may have restarted an on-demand service.
	if st, err = s.waitHealthy(guard); err != nil {
		s.violate(tr.n, invRecovers, "at the fault: %v", err)
		tr.aborted = true
		return
	}
	service, sig := target(tr.kind)
	// The floor: the same write by a new client on the healthy instance.
	began := time.Now()
	if at, _ := s.probe(tr, service, fmt.Sprintf("floor-%02d", tr.n), nil); !at.IsZero() {
		tr.floor = at.Sub(began)
		tr.floorSplit = fmt.Sprintf("connect %.2fs + write %.2fs", tr.lastConnect.Seconds(), tr.lastWrite.Seconds())
		if tr.floor > recoveryBound {
			tr.note("before the fault, a new client's write on the healthy instance took %.2fs (%s; load average %s)", tr.floor.Seconds(), tr.floorSplit, loadAverage())
		}
	}
	tr.pid = st.PID
	if service != "supervisor" {
		tr.pid = st.Services[service].PID
	}
	if name := procName(tr.pid); name != "deepcode-"+service {
		s.violate(tr.n, invRecovers, "pid %d of %s is %q", tr.pid, service, name)
		tr.aborted = true
		return
	}
	earlier := s.pidsOf("deepcode-" + service)
	var instance []int
	if service == "supervisor" {
		instance = s.env.Processes()
	}
	if err := syscall.Kill(tr.pid, sig); err != nil {
		s.t.Fatalf("kill %d: %v", tr.pid, err)
	}
	tr.killed = time.Now()

	key := fmt.Sprintf("probe-%02d", tr.n)
	switch tr.kind {
	case killSupervisor:
		s.watchOrphans(tr, instance)
		s.restartInstance(tr)
	case termAgentd:
		// While the stopped agentd finishes its turns: what a new client
		// gets. The recovery is measured on the agentd started after it.
		gone := make(chan struct{})
		var exit time.Duration
		go func() { defer close(gone); exit = timeGone(tr.pid, tr.killed) }()
		exited := func() bool {
			select {
			case <-gone:
				return true
			default:
				return false
			}
		}
		at, refused := s.probe(tr, service, key+"-grace", exited)
		<-gone
		if tr.graceExit = exit; exit < 0 {
			tr.note("the SIGTERMed agentd (pid %d) still runs %s later", tr.pid, guard)
		}
		switch {
		case at.IsZero():
			tr.graceErrors = refused
		case exit > 0 && at.Sub(tr.killed) > exit:
			// Answered by the agentd started after the stopped one.
			tr.accepted, tr.probeErrors = at, refused
		default:
			tr.graceAccepted, tr.graceErrors = at.Sub(tr.killed), refused
		}
	}
	if tr.accepted.IsZero() {
		tr.accepted, tr.probeErrors = s.probe(tr, service, key, nil)
	}
	tr.probeSplit = fmt.Sprintf("connect %.2fs + write %.2fs", tr.lastConnect.Seconds(), tr.lastWrite.Seconds())
	s.measure(tr, service, earlier)
	if tr.accepted.IsZero() {
		tr.aborted = true
	} else if tr.recovery > recoveryBound {
		s.violate(tr.n, invRecovery, "%s: the first write was accepted %.2fs after the restart (%.2fs after the fault; its last attempt: %s; the same write took %.2fs on the healthy instance: %s; load average %s); refused meanwhile: %s",
			tr.kind, tr.recovery.Seconds(), tr.outage.Seconds(), tr.probeSplit, tr.floor.Seconds(), tr.floorSplit, loadAverage(), fmtCounts(tr.probeErrors))
	}
	// The workload goes on a little after the recovery, then the checks.
	time.Sleep(1500 * time.Millisecond)
	if n := s.gate.pause(clients, 30*time.Second); n < clients {
		tr.note("only %d of %d clients paused within 30 s", n, clients)
	}
	s.check(tr)
}

// loadAverage is the machine's 1-minute load average and its CPUs, for the
// evidence of a slow recovery.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	one, _, _ := strings.Cut(string(b), " ")
	return fmt.Sprintf("%s on %d CPUs", one, runtime.NumCPU())
}

// target is the process and signal of a kind of fault.
func target(kind string) (string, syscall.Signal) {
	switch kind {
	case termAgentd:
		return "agentd", syscall.SIGTERM
	default:
		return strings.TrimPrefix(kind, "kill-"), syscall.SIGKILL
	}
}

// restartInstance runs `service start` at once after a supervisor kill, as
// a user (or a service manager) would, until it succeeds.
func (s *suite) restartInstance(tr *trial) {
	deadline := time.Now().Add(guard)
	for time.Now().Before(deadline) {
		began := time.Now()
		r, timedOut := s.cli(30*time.Second, "service", "start", "--json")
		if r.Code == 0 {
			tr.restart = time.Now()
			return
		}
		what := fmt.Sprintf("exit %d", r.Code)
		if timedOut {
			what = "no answer"
		}
		tr.startErrors = append(tr.startErrors, fmt.Sprintf("%s after %.1fs: %s", what, time.Since(began).Seconds(), strings.TrimSpace(firstLine(r.Stdout+r.Stderr))))
		time.Sleep(200 * time.Millisecond)
	}
	tr.note("service start did not succeed within %s", guard)
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	if len(first) > 300 {
		first = first[:300]
	}
	return first
}

// probe sends the write the fault interrupted until it is accepted (or
// until stop says so): a new client each attempt (a fresh identity check
// and connection, as a client started after the fault). The write is the
// killed service's own: a terminal for termhost, a keyed automation run for
// the scheduler, a keyed turn otherwise. It returns when the write was
// accepted (zero if it was not) and the refusals met before.
func (s *suite) probe(tr *trial, service, key string, stop func() bool) (time.Time, map[string]int) {
	ctx := context.Background()
	refused := map[string]int{}
	deadline := time.Now().Add(guard)
	var enq submitParams
	if service != "termhost" && service != "scheduler" {
		enq = submitParams{ThreadID: s.probeThread, MessageID: key, Input: input{Text: "append marks.txt " + key + "\nsay probe"}}
		s.rec.task(key, task{workspace: s.probeSpace, thread: s.probeThread})
	}
	for time.Now().Before(deadline) && (stop == nil || !stop()) {
		l := newLink(s.layout, "probe")
		// Where the time of the last attempt went: the connection (the
		// identity check, the WebSocket, initialize), then the write.
		began := time.Now()
		_, err := l.conn(ctx)
		tr.lastConnect = time.Since(began)
		if err != nil {
			l.close()
			refused[codeOf(err)]++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		began = time.Now()
		switch service {
		case "termhost":
			var c terminalCreated
			err = l.call(ctx, api.MethodTerminalCreate, terminalCreate{ThreadID: s.probeThread, Cols: 80, Rows: 24,
				Command: []string{"/bin/sh", "-c", "echo probe"}}, &c)
			if err == nil {
				_ = l.call(ctx, api.MethodTerminalClose, terminalRef{ThreadID: s.probeThread, TerminalID: c.TerminalID}, nil)
			}
		case "scheduler":
			p := runParams{AutomationID: s.automationID, RequestID: key}
			var res runResult
			if err = l.call(ctx, api.MethodAutomationRun, p, &res); err == nil {
				s.rec.accept(mutation{trial: tr.n, kind: "run", method: api.MethodAutomationRun, params: p,
					run: res.Run.ID, automation: s.automationID, request: key})
			}
		default:
			var res submitResult
			if err = l.call(ctx, api.MethodTurnEnqueue, enq, &res); err == nil {
				s.rec.accept(mutation{trial: tr.n, kind: "enqueue", method: api.MethodTurnEnqueue, params: enq,
					thread: s.probeThread, message: key, turn: res.Turn.ID})
			}
		}
		l.close()
		tr.lastWrite = time.Since(began)
		if err == nil {
			return time.Now(), refused
		}
		refused[codeOf(err)]++
		s.statusWhileRefused(tr, err)
		if !retryable(err) && !errs.Is(err, errs.ServiceNotRunning) {
			tr.note("the probe's %s was refused for good: %v", service, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}, refused
}

// measure sets the trial's figures from the probe's first accepted write:
// the restart is the `service start` answer after a supervisor kill, else
// the start of the killed service's new process.
func (s *suite) measure(tr *trial, service string, earlier map[int]bool) {
	if tr.accepted.IsZero() {
		s.violate(tr.n, invRecovers, "%s: no write accepted within %s; refused: %s", tr.kind, guard, fmtCounts(tr.probeErrors))
		return
	}
	tr.outage = tr.accepted.Sub(tr.killed)
	if tr.graceAccepted > 0 {
		tr.outage = min(tr.outage, tr.graceAccepted)
	}
	if tr.kind != killSupervisor {
		if _, at, ok := s.newest("deepcode-"+service, earlier); ok {
			tr.restart = at
		} else {
			tr.note("no new deepcode-%s process was found; recovery counted from the fault", service)
		}
	}
	if tr.restart.IsZero() {
		tr.restart = tr.killed
	}
	if tr.kind == termAgentd && tr.graceExit > 0 {
		// A SIGTERMed agentd lets its turns finish (the graceful window;
		// new writes are told SERVICE_STOPPING meanwhile), and the next
		// one, started on demand during that window, waits in standby for
		// it: the restart is when the stopped one is gone, not when its
		// successor's process began.
		tr.restart = maxTime(tr.restart, tr.killed.Add(tr.graceExit))
	}
	tr.recovery = max(tr.accepted.Sub(tr.restart), 0)
}

// statusWhileRefused asks status (at most once a second) while the probe's
// writes are refused with LEASE_HELD. Status saying ready with agentd
// running, between two such refusals, is a violation: it says the instance
// serves while it refuses every write.
func (s *suite) statusWhileRefused(tr *trial, err error) {
	if !errs.Is(err, errs.LeaseHeld) {
		tr.readyClaim = ""
		return
	}
	if tr.readyClaim != "" && !tr.statusFlagged {
		tr.statusFlagged = true
		s.violate(tr.n, invStatusHonest, "%s: status said %s, and the next write was again refused: %v", tr.kind, tr.readyClaim, err)
		return
	}
	if time.Since(tr.statusAsked) < time.Second {
		return
	}
	tr.statusAsked = time.Now()
	st, code, ok := s.status()
	if !ok {
		tr.statusReady = fmt.Sprintf("exit %d", code)
		return
	}
	ag := st.Services["agentd"]
	tr.statusReady = fmt.Sprintf("ready:%v phase %s, agentd %s", st.Ready, st.Phase, ag.State)
	if st.Ready && ag.State == "running" {
		tr.readyClaim = tr.statusReady
	}
}

// timeGone waits (bounded) for pid to exit and returns when it did,
// counted from since; -1 if it still runs.
func timeGone(pid int, since time.Time) time.Duration {
	for time.Since(since) < guard {
		if !alive(pid) {
			return time.Since(since)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// orphanRecord is how long a process of a killed supervisor's instance
// lived on.
type orphanRecord struct {
	trial    int
	name     string
	lifetime time.Duration
}

// watchOrphans follows the processes of the instance whose supervisor was
// killed until they exit.
func (s *suite) watchOrphans(tr *trial, pids []int) {
	var left []int
	names := map[int]string{}
	for _, p := range pids {
		// The CLI runs with the instance's home too; it is not the instance.
		if name := procName(p); p != tr.pid && name != "deepcode" && name != "" {
			left = append(left, p)
			names[p] = name
		}
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		for time.Since(tr.killed) < 2*guard && len(left) > 0 {
			left = slices.DeleteFunc(left, func(p int) bool {
				if alive(p) {
					return false
				}
				s.mu.Lock()
				s.orphans = append(s.orphans, orphanRecord{trial: tr.n, name: names[p], lifetime: time.Since(tr.killed)})
				s.mu.Unlock()
				return true
			})
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// pidsOf lists the live processes of the instance named name.
func (s *suite) pidsOf(name string) map[int]bool {
	out := map[int]bool{}
	for _, p := range s.env.Processes() {
		if procName(p) == name {
			out[p] = true
		}
	}
	return out
}

// newest is the latest-started live process named name that is not in
// earlier, and its start time.
func (s *suite) newest(name string, earlier map[int]bool) (int, time.Time, bool) {
	var best int
	var at time.Time
	for p := range s.pidsOf(name) {
		if earlier[p] {
			continue
		}
		if t, ok := procStart(p); ok && t.After(at) {
			best, at = p, t
		}
	}
	return best, at, best != 0
}

// procName is the base name of pid's executable as its command line names
// it ("" when it is gone).
func procName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	first, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(first))
}

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// alive: pid runs and is not a zombie.
func alive(pid int) bool {
	f := procStat(pid)
	return len(f) > 0 && f[0] != "Z"
}

// procStart is when pid started: field 22 of /proc/pid/stat is its start
// in clock ticks since boot (Linux reports them at USER_HZ, 100 a second),
// and /proc/uptime is the time since boot now, both to 10 ms.
func procStart(pid int) (time.Time, bool) {
	f := procStat(pid)
	// f[0] is field 3 (state): starttime, field 22, is f[19].
	if len(f) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, false
	}
	up, _, _ := strings.Cut(string(b), " ")
	uptime, err := strconv.ParseFloat(up, 64)
	if err != nil {
		return time.Time{}, false
	}
	age := time.Duration((uptime - float64(ticks)/100) * float64(time.Second))
	return now.Add(-age), true
}

// finish stops the workload, lets every accepted turn end, checks once
// more, stops the instance and checks that nothing of it is left.
func (s *suite) finish(stopWorkload context.CancelFunc, wg *sync.WaitGroup) {
	s.mu.Lock()
	s.current = 0
	s.mu.Unlock()
	ctx := context.Background()
	final := &trial{n: 0, kind: "final"}
	if n := s.gate.pause(clients, 30*time.Second); n < clients {
		final.note("only %d of %d clients paused within 30 s", n, clients)
	}
	if _, err := s.waitHealthy(guard); err != nil {
		s.violate(0, invRecovers, "after the last trial: %v", err)
		// The final checks need a serving instance: start it again.
		if r, _ := s.cli(60*time.Second, "service", "start", "--json"); r.Code != 0 {
			s.violate(0, invRecovers, "service start after the last trial: exit %d: %s", r.Code, firstLine(r.Stdout+r.Stderr))
		}
	}
	l := newLink(s.layout, "final")
	if err := s.retrying(ctx, l, "automation/pause", automationRef{AutomationID: s.automationID}, nil, guard); err != nil {
		s.violate(0, invRecovers, "automation/pause: %v", err)
	}
	l.close()
	// The approver still answers: every turn can end.
	active, err := s.waitTurnsEnd(2 * guard)
	if err != nil {
		s.violate(0, invTurnsEnd, "%v", err)
	} else if len(active) > 0 {
		s.violate(0, invTurnsEnd, "%d turns are still active %s after the workload stopped: %s", len(active), 2*guard, strings.Join(active, "; "))
	}
	stopWorkload()
	s.gate.resume()
	wg.Wait()
	s.bg.Wait()
	s.check(final)
	s.checkTranscripts(0)

	r, timedOut := s.cli(2*time.Minute, "service", "stop", "--json")
	if timedOut {
		s.violate(0, invNoProcessLeft, "service stop did not answer within 2 minutes")
	}
	if r.Code != 0 {
		s.violate(0, invNoProcessLeft, "service stop: exit %d: %s", r.Code, firstLine(r.Stdout+r.Stderr))
	}
	// The processes have been waited for by their supervisor when stop
	// answers; a moment is left for the kernel to reap them.
	time.Sleep(time.Second)
	if left := s.env.Processes(); len(left) > 0 {
		var names []string
		for _, p := range left {
			names = append(names, fmt.Sprintf("%d %s", p, procName(p)))
		}
		s.violate(0, invNoProcessLeft, "still running after service stop answered: %s", strings.Join(names, ", "))
		s.env.KillAll()
	}
	s.checkIntegrity(0)
	s.checkRebuild(0)
	s.scanLog(0)
	s.t.Logf("chaos: transcripts: %d threads, %d records; %d torn line(s), %d record(s) committed but not yet appended at a kill; rebuild of %d items in %s",
		s.transcriptThreads, s.transcriptRecords, s.tornLines, s.notAppended, s.rebuiltItems, s.rebuildTime.Round(time.Millisecond))
	for _, n := range final.notes {
		s.t.Logf("final: note: %s", n)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
