//go:build !windows

package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// Guards, never expectations: a loaded 2-core machine running race-built
// binaries can be slow, and a test only waits this long when it is failing.
const (
	guard     = 60 * time.Second
	longGuard = 120 * time.Second
)

// statusOut is what `service start|status|stop --json` print.
type statusOut struct {
	Running bool `json:"running"`
	mgmt.Status
	Note string `json:"note,omitempty"`
}

// cliError is the CLI's JSON error object.
type cliError struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

// runCLI runs the deepcode CLI without touching t, so that it may be called
// from several goroutines at once.
func runCLI(env *testkit.Env, args ...string) (testkit.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), longGuard)
	defer cancel()
	cmd := env.Command(ctx, "deepcode", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := testkit.Result{Stdout: out.String(), Stderr: errb.String()}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ctx.Err() != nil {
			return r, fmt.Errorf("deepcode %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, r.Stdout, r.Stderr)
		}
		r.Code = ee.ExitCode()
	}
	return r, nil
}

// start runs `service start --json` with extra arguments and returns the
// status it printed.
func start(t *testing.T, env *testkit.Env, args ...string) statusOut {
	t.Helper()
	var st statusOut
	env.MustRun(append([]string{"service", "start", "--json"}, args...)...).JSON(t, &st)
	if !st.Running || st.InstanceID == "" || st.Phase != mgmt.PhaseRunning {
		t.Fatalf("start did not report a running instance: %+v", st)
	}
	return st
}

// status runs `service status --json` and returns the status and exit code.
func status(t *testing.T, env *testkit.Env) (statusOut, int) {
	t.Helper()
	r := env.Run("service", "status", "--json")
	var st statusOut
	if r.Code == 0 || r.Code == 3 {
		r.JSON(t, &st)
	}
	return st, r.Code
}

// stop runs `service stop --json` and waits until no process of env is left.
func stop(t *testing.T, env *testkit.Env, args ...string) {
	t.Helper()
	env.MustRun(append([]string{"service", "stop", "--json"}, args...)...)
	waitNoProcesses(t, env)
	if _, code := status(t, env); code != 3 {
		t.Fatalf("status after stop: exit %d, want 3", code)
	}
}

// mgmtStatus asks the manager directly (authenticated), for polling without
// spawning a CLI each time.
func mgmtStatus(env *testkit.Env, opts client.Options) (mgmt.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := client.Connect(ctx, env.Layout(""), opts)
	if err != nil {
		return mgmt.Status{}, err
	}
	defer m.Close()
	return m.Status(ctx)
}

// connect returns an authenticated management client, closed at cleanup.
func connect(t *testing.T, env *testkit.Env) *client.Management {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	m, err := client.Connect(ctx, env.Layout(""), client.Options{})
	if err != nil {
		t.Fatalf("connect to the manager: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

// argv0 is the base name of a process's executable as its command line
// names it ("" when it is gone). A child of the supervisor shows the
// service's name once the exec trampoline has exec'd it.
func argv0(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	first, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(first))
}

// procState is the one-letter state of pid ("" when it is gone).
func procStat(pid int) (state string, ppid, sid, ttyNr int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, 0, 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, 0, 0
	}
	// state ppid pgrp session tty_nr ...
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 5 {
		return "", 0, 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	sid, _ = strconv.Atoi(f[3])
	ttyNr, _ = strconv.Atoi(f[4])
	return f[0], ppid, sid, ttyNr
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	st, _, _, _ := procStat(pid)
	return st != "" && st != "Z"
}

// processesByName groups env's live processes by executable name.
func processesByName(env *testkit.Env) map[string][]int {
	out := map[string][]int{}
	for _, pid := range env.Processes() {
		if name := argv0(pid); name != "" {
			out[name] = append(out[name], pid)
		}
	}
	for _, pids := range out {
		sort.Ints(pids)
	}
	return out
}

// waitNoProcesses waits until nothing runs with env's home.
func waitNoProcesses(t *testing.T, env *testkit.Env) {
	t.Helper()
	testkit.WaitFor(t, guard, "every process of the instance to exit", func() bool {
		return len(env.Processes()) == 0
	})
}

// kill9 sends SIGKILL.
func kill9(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("bad pid %d", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
}

// freePort returns a port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// agentdPeer is a JSON-RPC connection to agentd.sock (which starts the
// on-demand service if it is not running).
type agentdPeer struct {
	*rpc.Peer
	done chan struct{}
}

// dialAgentd connects to the on-demand service's socket; the connection is
// closed at cleanup if the test has not closed it.
func dialAgentd(t *testing.T, env *testkit.Env) *agentdPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	conn, err := rpc.Dial(ctx, rpc.DialOptions{
		Network: "unix",
		Address: env.Layout("").Socket(paths.AgentdSocket),
		Path:    "/rpc",
		Timeout: guard,
	})
	if err != nil {
		t.Fatalf("dial agentd: %v", err)
	}
	p := &agentdPeer{Peer: rpc.NewPeer(conn, rpc.PeerOptions{}), done: make(chan struct{})}
	go func() { defer close(p.done); _ = p.Run() }()
	t.Cleanup(p.close)
	return p
}

func (p *agentdPeer) close() {
	p.Close(rpc.CloseNormal, "test done")
	<-p.done
}

// call invokes method on the peer and fails the test on error.
func (p *agentdPeer) call(t *testing.T, method string, params, result any) {
	t.Helper()
	if err := p.try(method, params, result); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
}

func (p *agentdPeer) try(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	return p.Call(ctx, method, params, result)
}

// fakeState is the fake service's test/state.
type fakeState struct {
	PID        int    `json:"pid"`
	Draining   bool   `json:"draining"`
	Cancelled  int    `json:"cancelled"`
	InstanceID string `json:"instanceId"`
	Activity   struct {
		Turns int `json:"turns"`
	} `json:"activity"`
}

// serviceLog is the content of service.log (rotated backups are not
// expected in tests).
func serviceLog(env *testkit.Env) string {
	b, _ := os.ReadFile(env.Layout("").ServiceLog())
	return string(b)
}

// logLines returns the lines of service.log containing every one of subs.
func logLines(env *testkit.Env, subs ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(serviceLog(env), "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// newEnv is testkit.NewEnv for these tests, which read processes, their
// states and descriptors from /proc: elsewhere they are skipped.
func newEnv(t *testing.T, bin string) *testkit.Env {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc (Linux) to inspect the instance's processes")
	}
	return testkit.NewEnv(t, bin)
}

// fakeEnv is an environment whose agentd is the fake test service.
func fakeEnv(t *testing.T, extra ...string) *testkit.Env {
	t.Helper()
	env := newEnv(t, testkit.BinariesWithFake(t))
	env.Extra = append(env.Extra, extra...)
	return env
}

// crashMarks are what the Go runtime writes to a process's stderr (which the
// supervisor copies into service.log) on a data race (race-built binaries),
// a panic or a fatal error.
var crashMarks = regexp.MustCompile(`(?m)^(WARNING: DATA RACE|panic: |fatal error: )`)

// watchLog fails the test if any process of env reported a data race, a
// panic or a fatal error in service.log, and prints the log when the test
// fails.
func watchLog(t *testing.T, env *testkit.Env) {
	t.Cleanup(func() {
		log := serviceLog(env)
		if m := crashMarks.FindString(log); m != "" {
			t.Errorf("a process reported %q in service.log", m)
		}
		if t.Failed() {
			t.Logf("service.log:\n%s", log)
		}
	})
}
