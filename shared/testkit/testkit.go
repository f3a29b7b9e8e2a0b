// Package testkit builds the real binaries once per test process and runs
// them in isolated homes, so tests exercise real processes, sockets, files
// and signals.
package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// ModuleRoot is the repository root.
func ModuleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// Binaries builds every cmd/ binary and the benchmarks' echo server (with
// the race detector when the tests run with it) into a directory shared by
// the test process, plus the fake test service as deepcode-agentd in a
// sibling "withfake" directory.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deepcode-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		args := []string{"build", "-o", dir + string(filepath.Separator)}
		if raceEnabled {
			args = append(args, "-race")
		}
		// The echo server of StartEchoProcess is built with them.
		args = append(args, "./cmd/...", "./shared/testkit/echoserver")
		cmd := exec.Command("go", args...)
		cmd.Dir = ModuleRoot()
		if !raceEnabled {
			// As `make build` and the packages build them: static. The
			// race detector needs cgo.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

var (
	fakeOnce sync.Once
	fakeDir  string
	fakeErr  error
)

// BinariesWithFake is Binaries plus the fake test service installed as the
// on-demand service deepcode-agentd (see fakeservice).
func BinariesWithFake(t testing.TB) string {
	t.Helper()
	real := Binaries(t)
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deepcode-binfake-")
		if err != nil {
			fakeErr = err
			return
		}
		fakeDir = dir
		entries, _ := os.ReadDir(real)
		for _, e := range entries {
			if err := os.Symlink(filepath.Join(real, e.Name()), filepath.Join(dir, e.Name())); err != nil {
				fakeErr = err
				return
			}
		}
		// The supervisor looks for binaries beside its own executable, so a
		// symlinked supervisor would look in real/: copy it instead.
		_ = os.Remove(filepath.Join(dir, "deepcode-supervisor"))
		if err := copyFile(filepath.Join(real, "deepcode-supervisor"), filepath.Join(dir, "deepcode-supervisor")); err != nil {
			fakeErr = err
			return
		}
		for _, name := range []string{"deepcode", "deepcode-tui"} {
			_ = os.Remove(filepath.Join(dir, name))
			if err := copyFile(filepath.Join(real, name), filepath.Join(dir, name)); err != nil {
				fakeErr = err
				return
			}
		}
		args := []string{"build", "-o", filepath.Join(dir, "deepcode-agentd")}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./shared/testkit/fakeservice")
		cmd := exec.Command("go", args...)
		cmd.Dir = ModuleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeErr = fmt.Errorf("go build fakeservice: %v\n%s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakeDir
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// Env is an isolated deepcode home with its own runtime directory.
type Env struct {
	T          testing.TB
	Bin        string
	Home       string
	RuntimeDir string
	// Extra environment, KEY=VALUE.
	Extra []string
}

// NewEnv makes an isolated environment using the binaries in bin; it stops
// whatever instances it started when the test ends.
func NewEnv(t testing.TB, bin string) *Env {
	t.Helper()
	rt, err := os.MkdirTemp("", "dcrt-") // short: socket paths must stay under sun_path
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &Env{T: t, Bin: bin, Home: filepath.Join(t.TempDir(), "home"), RuntimeDir: rt}
	t.Cleanup(func() {
		e.KillAll()
		_ = os.RemoveAll(rt)
	})
	return e
}

// Environ is the environment for commands run in e.
func (e *Env) Environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DEEPCODE_") || strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") ||
			strings.HasPrefix(kv, "LISTEN_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") ||
			strings.HasPrefix(kv, "JOURNAL_STREAM=") || strings.HasPrefix(kv, "INVOCATION_ID=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		paths.EnvHome+"="+e.Home,
		paths.EnvRuntimeDir+"="+e.RuntimeDir,
		"DEEPCODE_LIBEXEC="+e.Bin,
		"PATH="+e.Bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		// Terminals run the login shell: a plain sh, not the user's with its
		// rc files (a bashrc that waits on a lock held by a shell a test
		// killed held terminal tests up for a minute). Extra overrides it.
		"SHELL=/bin/sh",
	)
	if raceEnabled && os.Getenv("GORACE") == "" {
		// A race-built binary sleeps a second at exit by default (so late
		// reports can be written); every CLI call and every stop would pay
		// it. Reports still go to stderr, which is service.log for services.
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return append(env, e.Extra...)
}

// Command prepares one of the binaries.
func (e *Env) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(e.Bin, name), args...)
	cmd.Env = e.Environ()
	return cmd
}

// Result of a CLI run.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// JSON decodes stdout.
func (r Result) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s\nstderr: %s", err, r.Stdout, r.Stderr)
	}
}

// Run runs the deepcode CLI and waits (at most two minutes).
func (e *Env) Run(args ...string) Result {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.Command(ctx, "deepcode", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			e.T.Fatalf("deepcode %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// MustRun is Run that fails the test on a non-zero exit.
func (e *Env) MustRun(args ...string) Result {
	e.T.Helper()
	r := e.Run(args...)
	if r.Code != 0 {
		e.T.Fatalf("deepcode %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// Getenv looks a variable up in e's environment.
func (e *Env) Getenv(key string) string {
	env := e.Environ()
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// Layout is the layout of database ("" = default) in e.
func (e *Env) Layout(database string) *paths.Layout {
	e.T.Helper()
	l, err := paths.ResolveWith(e.Getenv, e.Home, database)
	if err != nil {
		e.T.Fatal(err)
	}
	return l
}

// KillAll SIGKILLs every process that runs with this env's home: cleanup
// after tests that leave instances behind on purpose.
func (e *Env) KillAll() {
	for _, pid := range e.Processes() {
		// os.Process.Kill, not syscall.Kill: this package must also
		// compile for Windows (make cross builds ./...).
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
			_ = p.Release()
		}
	}
}

// Processes lists live processes whose environment names this home (Linux).
func (e *Env) Processes() []int {
	if runtime.GOOS != "linux" {
		return nil
	}
	needle := []byte(paths.EnvHome + "=" + e.Home + "\x00")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range ents {
		var pid int
		if _, err := fmt.Sscanf(d.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + d.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// Instance reads instance.json of database ("" = default).
func (e *Env) Instance(database string) (*discovery.Instance, error) {
	return discovery.ReadInstance(e.Layout(database))
}

// WaitFor polls cond every 20 ms until it holds or the timeout passes (a
// guard, not a timing assertion).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

// Main runs a package's tests and then removes the binaries this process
// built. Every package that uses Binaries calls it from TestMain:
//
//	func TestMain(m *testing.M) { testkit.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	for _, d := range []string{fakeDir, binDir} {
		if d != "" {
			_ = os.RemoveAll(d)
		}
	}
	os.Exit(code)
}
