//go:build !windows

package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestConcurrentStartsConverge: eight `service start` at once all answer
// with the same instance; exactly one supervisor, manager and gateway run;
// no launcher leaves an orphaned or unreaped supervisor behind; stop leaves
// nothing.
//
// Not parallel: the test process makes itself a child subreaper for its
// duration, so that any process orphaned by a launcher (a losing supervisor
// the launcher did not reap, dead or alive) is reparented to this process,
// where the test sees it, instead of to init, which would hide it.
func TestConcurrentStartsConverge(t *testing.T) {
	bin := testkit.Binaries(t)
	becomeSubreaper(t)
	env := newEnv(t, bin)
	watchLog(t, env)

	const n = 8
	results := make([]testkit.Result, n)
	runErrs := make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i], runErrs[i] = runCLI(env, "service", "start", "--port", "0", "--json")
		}()
	}
	close(gate)
	wg.Wait()

	var first statusOut
	started := 0
	for i, r := range results {
		if runErrs[i] != nil {
			t.Fatal(runErrs[i])
		}
		if r.Code != 0 {
			t.Fatalf("start #%d: exit %d\nstdout: %s\nstderr: %s", i, r.Code, r.Stdout, r.Stderr)
		}
		var st statusOut
		r.JSON(t, &st)
		if !st.Running || st.InstanceID == "" || st.Port == 0 {
			t.Fatalf("start #%d: %+v", i, st)
		}
		if i == 0 {
			first = st
		} else if st.InstanceID != first.InstanceID || st.PID != first.PID || st.Port != first.Port {
			t.Fatalf("start #%d answered with instance %s (pid %d, port %d), start #0 with %s (pid %d, port %d)",
				i, st.InstanceID, st.PID, st.Port, first.InstanceID, first.PID, first.Port)
		}
		if st.Note == "started" {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d of %d starts say they launched the instance, want exactly 1", started, n)
	}

	// Exactly one of each process, and they are the ones status names.
	byName := processesByName(env)
	want := map[string]int{"deepcode-supervisor": first.PID}
	for name, svc := range first.Services {
		if svc.PID != 0 {
			want["deepcode-"+name] = svc.PID
		}
	}
	for name, pid := range want {
		if got := byName[name]; len(got) != 1 || got[0] != pid {
			t.Errorf("%s processes: %v, want exactly [%d]", name, got, pid)
		}
	}
	if all := env.Processes(); len(all) != len(want) {
		t.Errorf("processes of the instance: %v (%v), want %d", all, byName, len(want))
	}

	// The only process the launchers left to us is the running supervisor:
	// a losing launcher's supervisor was reaped before that launcher
	// returned (not a zombie here), and none was left running.
	for pid, st := range children() {
		if pid != first.PID {
			t.Errorf("orphan left by a launcher: pid %d %q state %s", pid, argv0(pid), st)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	stop(t, env)
}

// TestStartsRacingForegroundServeConverge: `service start` calls racing
// `serve --foreground` runs, which take instance.lock without the
// management lock, so some launchers' supervisors may lose the race for
// instance.lock. Whoever wins, every start answers with the one instance,
// the losing foreground runs exit with ALREADY_RUNNING's status, exactly
// one supervisor runs, and no launcher leaves a supervisor behind.
//
// Not parallel: child subreaper, as above.
func TestStartsRacingForegroundServeConverge(t *testing.T) {
	bin := testkit.Binaries(t)
	becomeSubreaper(t)
	env := newEnv(t, bin)
	watchLog(t, env)

	const starts, serves = 6, 2
	gate := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]testkit.Result, starts)
	runErrs := make([]error, starts)
	for i := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			results[i], runErrs[i] = runCLI(env, "service", "start", "--port", "0", "--json")
		}()
	}
	type served struct {
		cmd    *exec.Cmd
		waited chan error
	}
	var fg []*served
	for range serves {
		cmd := env.Command(context.Background(), "deepcode", "serve", "--foreground", "--port", "0")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		fg = append(fg, &served{cmd: cmd, waited: make(chan error, 1)})
	}
	t.Cleanup(func() {
		for _, s := range fg {
			if s.cmd.Process != nil {
				_ = s.cmd.Process.Kill()
				<-s.waited
			}
		}
	})
	for _, s := range fg {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			if err := s.cmd.Start(); err != nil {
				s.waited <- err
				return
			}
			go func() { s.waited <- s.cmd.Wait() }()
		}()
	}
	close(gate)
	wg.Wait()

	var first statusOut
	for i, r := range results {
		if runErrs[i] != nil {
			t.Fatal(runErrs[i])
		}
		if r.Code != 0 {
			t.Fatalf("start #%d: exit %d\nstdout: %s\nstderr: %s", i, r.Code, r.Stdout, r.Stderr)
		}
		var st statusOut
		r.JSON(t, &st)
		if i == 0 {
			first = st
		} else if st.InstanceID != first.InstanceID || st.PID != first.PID {
			t.Fatalf("start #%d answered with instance %s (pid %d), start #0 with %s (pid %d)", i, st.InstanceID, st.PID, first.InstanceID, first.PID)
		}
	}

	// A foreground run that did not win exits with ALREADY_RUNNING's status;
	// the one that won (if one did) is the instance's supervisor.
	running := map[int]bool{}
	for _, s := range fg {
		if s.cmd.Process != nil && s.cmd.Process.Pid == first.PID {
			running[first.PID] = true
			continue
		}
		select {
		case err := <-s.waited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 4 {
				t.Errorf("a losing serve --foreground ended with %v, want exit status 4 (already running)", err)
			}
			s.waited <- err
		case <-time.After(guard):
			t.Fatalf("serve --foreground (pid %d) neither won nor exited", s.cmd.Process.Pid)
		}
	}
	byName := processesByName(env)
	if len(byName["deepcode-supervisor"]) != 1 || byName["deepcode-supervisor"][0] != first.PID ||
		len(byName["deepcode-manager"]) != 1 || len(byName["deepcode-gateway"]) != 1 {
		t.Fatalf("processes: %v, want one supervisor (pid %d), manager and gateway", byName, first.PID)
	}
	for pid, st := range children() {
		if pid != first.PID {
			t.Errorf("orphan left by a launcher: pid %d %q state %s", pid, argv0(pid), st)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	stop(t, env)
	if running[first.PID] {
		t.Logf("the instance was won by serve --foreground (pid %d)", first.PID)
	}
}

// TestSurvivesTerminalClosing: `service start` typed in a terminal session;
// then the terminal goes away (its master closes: the kernel hangs up the
// session and SIGHUPs its controlling process) and the session's process
// group is sent SIGHUP too. The instance keeps running, unchanged, because
// it lives in its own session without a controlling terminal and its stdio
// does not point at the terminal.
func TestSurvivesTerminalClosing(t *testing.T) {
	t.Parallel()
	env := newEnv(t, testkit.Binaries(t))
	watchLog(t, env)

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal available: %v", err)
	}
	defer ptmx.Close()
	ttyName := tty.Name()
	// The shell stays as the session's controlling process after the start
	// returns, as a login shell would.
	cmd := exec.Command("sh", "-c", "deepcode service start --port 0; echo DONE-$?; exec sleep 600")
	cmd.Env = env.Environ()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = tty.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
	})
	session := cmd.Process.Pid

	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return screen.String() }
	testkit.WaitFor(t, longGuard, "`deepcode service start` to finish in the terminal", func() bool {
		return strings.Contains(text(), "DONE-")
	})
	if !strings.Contains(text(), "DONE-0") {
		t.Fatalf("start in the terminal failed:\n%s", text())
	}

	before, code := status(t, env)
	if code != 0 || !before.Running {
		t.Fatalf("status after start: exit %d %+v", code, before)
	}
	pids := map[string]int{
		"deepcode-supervisor": before.PID,
		"deepcode-manager":    before.Services["manager"].PID,
		"deepcode-gateway":    before.Services["gateway"].PID,
	}
	for name, pid := range pids {
		if argv0(pid) != name {
			t.Fatalf("pid %d is %q, want %s", pid, argv0(pid), name)
		}
		_, _, sid, ttyNr := procStat(pid)
		if sid == session {
			t.Errorf("%s (pid %d) is in the terminal's session %d", name, pid, sid)
		}
		if ttyNr != 0 {
			t.Errorf("%s (pid %d) has a controlling terminal (tty_nr %d)", name, pid, ttyNr)
		}
		fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		for _, fd := range fds {
			if target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); target == ttyName {
				t.Errorf("%s (pid %d) keeps fd %s open on the terminal %s", name, pid, fd.Name(), ttyName)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The terminal closes.
	_ = ptmx.Close()
	if err := syscall.Kill(-session, syscall.SIGHUP); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("SIGHUP the session's process group: %v", err)
	}
	select {
	case err := <-waited:
		// The hangup reached the session: its shell died of SIGHUP.
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("the terminal's shell exited with %v, want death by SIGHUP", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
			t.Fatalf("the terminal's shell ended with %v, want death by SIGHUP", err)
		}
		waited <- err // for the cleanup
	case <-time.After(guard):
		t.Fatal("the terminal's shell did not die after the hangup")
	}

	// The hangup has been delivered; the instance is untouched.
	after, code := status(t, env)
	if code != 0 || !after.Running || after.Phase != mgmt.PhaseRunning || !after.Ready {
		t.Fatalf("status after the terminal closed: exit %d %+v", code, after)
	}
	if after.InstanceID != before.InstanceID {
		t.Fatalf("instance changed from %s to %s", before.InstanceID, after.InstanceID)
	}
	for name, pid := range pids {
		if !alive(pid) || argv0(pid) != name {
			t.Errorf("%s (pid %d) did not survive the terminal closing", name, pid)
		}
	}
	if after.Services["manager"].PID != pids["deepcode-manager"] || after.Services["gateway"].PID != pids["deepcode-gateway"] {
		t.Errorf("services were restarted: before %+v, after %+v", before.Services, after.Services)
	}
	if t.Failed() {
		t.FailNow()
	}
	stop(t, env)
}

// TestManagerAndGatewayRestartAfterSIGKILL: the supervisor restarts a
// SIGKILLed manager (status answers again for the same instance, from a new
// manager process) and a SIGKILLed gateway (the TCP port serves again).
func TestManagerAndGatewayRestartAfterSIGKILL(t *testing.T) {
	t.Parallel()
	env := newEnv(t, testkit.Binaries(t))
	watchLog(t, env)
	st := start(t, env, "--port", "0")
	mgrPID, gwPID := st.Services["manager"].PID, st.Services["gateway"].PID
	if argv0(mgrPID) != "deepcode-manager" || argv0(gwPID) != "deepcode-gateway" {
		t.Fatalf("status names manager pid %d (%q) and gateway pid %d (%q)", mgrPID, argv0(mgrPID), gwPID, argv0(gwPID))
	}

	kill9(t, mgrPID)
	var now mgmt.Status
	testkit.WaitFor(t, guard, "a new manager to answer status with the gateway registered", func() bool {
		s, err := mgmtStatus(env, client.Options{})
		if err != nil {
			return false
		}
		now = s
		return s.Services["manager"].PID != mgrPID && s.Ready && s.Services["gateway"].State == "running"
	})
	if now.InstanceID != st.InstanceID {
		t.Fatalf("after the manager restart the instance is %s, want %s", now.InstanceID, st.InstanceID)
	}
	newMgr := now.Services["manager"].PID
	if argv0(newMgr) != "deepcode-manager" || alive(mgrPID) {
		t.Fatalf("new manager pid %d is %q; old pid %d alive=%v", newMgr, argv0(newMgr), mgrPID, alive(mgrPID))
	}
	if now.PID != st.PID || now.Port != st.Port {
		t.Fatalf("supervisor or port changed: pid %d→%d, port %d→%d", st.PID, now.PID, st.Port, now.Port)
	}
	// The CLI sees the same instance.
	if cli, code := status(t, env); code != 0 || cli.InstanceID != st.InstanceID {
		t.Fatalf("status after the manager restart: exit %d, instance %s", code, cli.InstanceID)
	}
	if len(logLines(env, "child=manager", "exited; restarting")) == 0 {
		t.Errorf("the supervisor did not log the manager's restart")
	}

	gwPID = now.Services["gateway"].PID
	kill9(t, gwPID)
	testkit.WaitFor(t, guard, "a new gateway to serve the TCP port", func() bool {
		s, err := mgmtStatus(env, client.Options{})
		if err != nil || s.Services["gateway"].State != "running" || s.Services["gateway"].PID == gwPID {
			return false
		}
		now = s
		// Management through the gateway's port, identity-checked.
		viaTCP, err := mgmtStatus(env, client.Options{Transport: client.TCP})
		return err == nil && viaTCP.InstanceID == st.InstanceID && healthLive(st.Port)
	})
	if now.InstanceID != st.InstanceID || now.Port != st.Port || now.Services["manager"].PID != newMgr {
		t.Fatalf("after the gateway restart: %+v", now)
	}
	if argv0(now.Services["gateway"].PID) != "deepcode-gateway" || alive(gwPID) {
		t.Fatalf("new gateway pid %d is %q; old pid %d alive=%v", now.Services["gateway"].PID, argv0(now.Services["gateway"].PID), gwPID, alive(gwPID))
	}
	stop(t, env)
}

// healthLive gets /health/live through the gateway's TCP port.
func healthLive(port int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health/live", nil)
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// TestSupervisorSIGKILLRecovers: when the supervisor is SIGKILLed, its
// children notice (the lifeline pipe reaches EOF) and stop gracefully by
// themselves (exit status 0, not killed by a signal); the next
// `service start` recovers with a new instance on the same explicit port.
//
// Not parallel: as a child subreaper this process inherits the orphaned
// children and can read how they ended.
func TestSupervisorSIGKILLRecovers(t *testing.T) {
	bin := testkit.Binaries(t)
	becomeSubreaper(t)
	env := newEnv(t, bin)
	watchLog(t, env)
	port := freePort(t)
	st := start(t, env, "--port", strconv.Itoa(port))
	if st.Port != port {
		t.Fatalf("started on port %d, asked for %d", st.Port, port)
	}
	if argv0(st.PID) != "deepcode-supervisor" {
		t.Fatalf("status pid %d is %q, want the supervisor", st.PID, argv0(st.PID))
	}
	if n, want := len(env.Processes()), 1+runningServices(st.Services); n != want {
		t.Fatalf("%d processes before the kill, want %d: %v", n, want, processesByName(env))
	}
	mgrPID, gwPID := st.Services["manager"].PID, st.Services["gateway"].PID

	kill9(t, st.PID)
	if ws := reap(t, st.PID); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("supervisor ended with %v, want SIGKILL", ws)
	}
	for name, pid := range map[string]int{"manager": mgrPID, "gateway": gwPID} {
		if ws := reap(t, pid); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("the %s ended with %s after losing its supervisor, want a graceful exit (status 0)", name, describeWait(ws))
		}
	}
	waitNoProcesses(t, env)
	if t.Failed() {
		t.FailNow()
	}

	again := start(t, env, "--port", strconv.Itoa(port))
	if again.InstanceID == st.InstanceID || again.PID == st.PID {
		t.Fatalf("start after the kill reused instance %s / pid %d", again.InstanceID, again.PID)
	}
	if again.Port != port {
		t.Fatalf("restarted on port %d, want %d", again.Port, port)
	}
	if !healthLive(port) {
		t.Fatalf("the port %d does not serve after the recovery", port)
	}
	byName := processesByName(env)
	for _, name := range []string{"deepcode-supervisor", "deepcode-manager", "deepcode-gateway"} {
		if len(byName[name]) != 1 {
			t.Fatalf("after recovery: %v", byName)
		}
	}

	// Again, but start at once, while the orphaned services may still be
	// shutting down and holding the port and the sockets.
	kill9(t, again.PID)
	third := start(t, env, "--port", strconv.Itoa(port))
	if third.InstanceID == again.InstanceID || third.Port != port || !healthLive(port) {
		t.Fatalf("immediate start after the kill: %+v", third)
	}
	for _, pid := range []int{again.PID, again.Services["manager"].PID, again.Services["gateway"].PID} {
		reap(t, pid)
	}
	byName = processesByName(env)
	if len(byName["deepcode-supervisor"]) != 1 || len(byName["deepcode-manager"]) != 1 || len(byName["deepcode-gateway"]) != 1 {
		t.Fatalf("after the immediate recovery: %v", byName)
	}
	stop(t, env)
}

// reap waits for pid, a child of this process (directly or, as a
// subreaper, by reparenting), and returns how it ended.
func reap(t *testing.T, pid int) syscall.WaitStatus {
	t.Helper()
	type result struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		done <- result{ws, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("wait for pid %d (%q): %v", pid, argv0(pid), r.err)
		}
		return r.ws
	case <-time.After(guard):
		t.Fatalf("pid %d (%q) did not exit", pid, argv0(pid))
		return 0
	}
}

func describeWait(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		return "signal " + ws.Signal().String()
	}
	return "status " + strconv.Itoa(int(ws))
}

// TestInstanceHoldsNoLauncherDescriptor: a descriptor that the launcher of
// `service start` left open without close-on-exec (a shell's `exec 4>…`,
// make's jobserver pipe, a CI runner's pipes) is held by no process of the
// instance, so whoever waits for EOF on it is not kept waiting until the
// instance stops.
func TestInstanceHoldsNoLauncherDescriptor(t *testing.T) {
	t.Parallel()
	env := newEnv(t, testkit.Binaries(t))
	watchLog(t, env)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pipeID, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(w.Fd())))

	ctx, cancel := context.WithTimeout(context.Background(), longGuard)
	defer cancel()
	cmd := env.Command(ctx, "deepcode", "service", "start", "--port", "0", "--json")
	// The write end as fds 3 and 4 of the CLI (the CLI reuses 3 for the
	// supervisor's status pipe; 4 stays as it was inherited).
	cmd.ExtraFiles = []*os.File{w, w}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("start: %v\n%s", err, out.String())
	}
	_ = w.Close()

	eof := make(chan error, 1)
	go func() { _, err := io.ReadAll(r); eof <- err }()
	select {
	case err := <-eof:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(guard):
		for _, pid := range env.Processes() {
			fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
			for _, fd := range fds {
				if target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); target == pipeID {
					t.Errorf("%s (pid %d) holds the launcher's %s as fd %s", argv0(pid), pid, pipeID, fd.Name())
				}
			}
		}
		t.Fatal("the launcher's pipe never reached EOF")
	}
	if st, _ := status(t, env); len(processesByName(env)) != 1+runningServices(st.Services) {
		t.Fatalf("instance processes: %v, status: %+v", processesByName(env), st.Services)
	}
	stop(t, env)
}

// runningServices counts the services status reports with a process.
func runningServices(services map[string]mgmt.ServiceState) int {
	n := 0
	for _, s := range services {
		if s.PID != 0 {
			n++
		}
	}
	return n
}
