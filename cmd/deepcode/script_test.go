//go:build linux

package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
	"github.com/rogpeppe/go-internal/testscript"
)

// waitGuard bounds every wait in the scripts. It is a guard against a hang,
// never a timing assertion: on a loaded machine things may take a while.
const waitGuard = 2 * time.Minute

type kitKey struct{}

// TestScripts runs testdata/script/*.txtar against the real binaries: the
// deepcode CLI and the service binaries it launches, in a private
// DEEPCODE_HOME per script.
//
// Besides testscript's own commands the scripts have:
//
//	exits N prog args...   run prog like exec; its exit status must be N
//	holdport VAR           listen on 127.0.0.1:0 until the script ends; $VAR is the port
//	freeports VAR...       ports that were free a moment ago (held together, then released)
//	[!] jsonis PATH VALUE  the JSON on stdout has VALUE at the dotted PATH
//	[!] jsonre PATH RE     … a value at PATH that matches the regexp RE
//	jsonset VAR PATH       set $VAR to the value at PATH
//	jsonkeys PATH K1,K2... the object at PATH has exactly these keys
//	writefile FILE TEXT... write the (expanded) words, space-separated, as FILE
//	waitstatus [args...]   poll `deepcode service status args...` until it exits 0
//	waitfile FILE RE       poll until FILE exists and its content matches RE
//	noprocs                no process with this script's DEEPCODE_HOME is alive
//	waitjson PATH VALUE prog args...
//	                       run prog until it exits 0 with VALUE at PATH (keys and indexes) in the JSON on stdout
//	prefix VAR N VALUE     set $VAR to the first N bytes of VALUE
func TestScripts(t *testing.T) {
	bin := testkit.Binaries(t)
	testscript.Run(t, testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(e *testscript.Env) error {
			work, err := filepath.Abs(e.WorkDir)
			if err != nil {
				return err
			}
			// Short, so socket paths stay under the sun_path limit.
			rt, err := os.MkdirTemp("", "dcrt-")
			if err != nil {
				return err
			}
			if err := os.Chmod(rt, 0o700); err != nil {
				return err
			}
			kit := &testkit.Env{Bin: bin, Home: filepath.Join(work, "home"), RuntimeDir: rt}
			e.Values[kitKey{}] = kit
			e.Setenv("PATH", bin+string(os.PathListSeparator)+e.Getenv("PATH"))
			e.Setenv("DEEPCODE_HOME", kit.Home)
			e.Setenv("DEEPCODE_RUNTIME_DIR", rt)
			e.Setenv("DEEPCODE_LIBEXEC", bin)
			// For scripts that build a binary of their own (version.txtar):
			// the module and the go command's caches.
			e.Setenv("MODROOT", testkit.ModuleRoot())
			for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
				if out, err := exec.Command("go", "env", k).Output(); err == nil {
					e.Setenv(k, strings.TrimSpace(string(out)))
				}
			}
			// A guard for a loaded machine with race-enabled binaries, not
			// an expectation.
			e.Setenv("DEEPCODE_SERVICE_START_TIMEOUT", "60s")
			// Race-enabled binaries otherwise sleep a second at every exit.
			e.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			e.Defer(func() {
				if pids := kit.Processes(); len(pids) > 0 {
					e.T().Log(fmt.Sprintf("killing processes left behind: %s", describe(pids)))
					kit.KillAll()
				}
				_ = os.RemoveAll(rt)
			})
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":      cmdExits,
			"holdport":   cmdHoldport,
			"freeports":  cmdFreeports,
			"jsonis":     cmdJSONIs,
			"jsonre":     cmdJSONRe,
			"jsonset":    cmdJSONSet,
			"jsonkeys":   cmdJSONKeys,
			"writefile":  cmdWritefile,
			"waitstatus": cmdWaitstatus,
			"waitfile":   cmdWaitfile,
			"noprocs":    cmdNoprocs,
			"waitjson":   cmdWaitjson,
			"prefix":     cmdPrefix,
		},
	})
}

func noNeg(ts *testscript.TestScript, neg bool, name string) {
	if neg {
		ts.Fatalf("%s does not support !", name)
	}
}

// exitCode runs prog through the script (so stdout and stderr can be
// checked afterwards) and returns its exit status.
func exitCode(ts *testscript.TestScript, prog string, args ...string) int {
	err := ts.Exec(prog, args...)
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() < 0 {
		ts.Fatalf("%s: %v", prog, err)
	}
	return ee.ExitCode()
}

func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "exits")
	if len(args) < 2 {
		ts.Fatalf("usage: exits N prog [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: bad status %q", args[0])
	}
	if got := exitCode(ts, args[1], args[2:]...); got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

func cmdHoldport(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "holdport")
	if len(args) != 1 {
		ts.Fatalf("usage: holdport VAR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Defer(func() { _ = l.Close() })
	ts.Setenv(args[0], strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
}

func cmdFreeports(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "freeports")
	if len(args) == 0 {
		ts.Fatalf("usage: freeports VAR...")
	}
	var ls []net.Listener
	for _, name := range args {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		ts.Check(err)
		ls = append(ls, l)
		ts.Setenv(name, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		_ = l.Close()
	}
}

// jsonAt decodes stdout, which must be exactly one JSON value, and returns
// the value at the dotted path (object keys, or indexes into arrays; "."
// is the whole value).
func jsonAt(ts *testscript.TestScript, path string) any {
	out := ts.ReadFile("stdout")
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		ts.Fatalf("stdout is not JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		ts.Fatalf("stdout holds more than one JSON value")
	}
	if path == "." {
		return v
	}
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			x, ok := c[k]
			if !ok {
				ts.Fatalf("no %q in the JSON on stdout (looking up %s)", k, path)
			}
			v = x
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				ts.Fatalf("no index %q in the JSON on stdout (looking up %s)", k, path)
			}
			v = c[i]
		default:
			ts.Fatalf("%s: %q is inside a %T, not an object or array", path, k, v)
		}
	}
	return v
}

// jsonText is a string as it is, anything else as compact JSON.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// A missing path fails even under !, so a negated check cannot pass just
// because the output changed shape.
func cmdJSONIs(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: jsonis PATH VALUE")
	}
	got := jsonText(jsonAt(ts, args[0]))
	if (got == args[1]) == neg {
		if neg {
			ts.Fatalf("%s is %q, want anything else", args[0], got)
		}
		ts.Fatalf("%s is %q, want %q", args[0], got, args[1])
	}
}

func cmdJSONRe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: jsonre PATH REGEXP")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	got := jsonText(jsonAt(ts, args[0]))
	if re.MatchString(got) == neg {
		if neg {
			ts.Fatalf("%s is %q, which matches %q", args[0], got, args[1])
		}
		ts.Fatalf("%s is %q, which does not match %q", args[0], got, args[1])
	}
}

func cmdJSONSet(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "jsonset")
	if len(args) != 2 {
		ts.Fatalf("usage: jsonset VAR PATH")
	}
	ts.Setenv(args[0], jsonText(jsonAt(ts, args[1])))
}

func cmdJSONKeys(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "jsonkeys")
	if len(args) != 2 {
		ts.Fatalf("usage: jsonkeys PATH KEY,KEY...")
	}
	obj, ok := jsonAt(ts, args[0]).(map[string]any)
	if !ok {
		ts.Fatalf("%s is not an object", args[0])
	}
	got := slices.Sorted(maps.Keys(obj))
	want := strings.Split(args[1], ",")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		ts.Fatalf("%s has keys %s, want %s", args[0], strings.Join(got, ","), strings.Join(want, ","))
	}
}

func cmdWritefile(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "writefile")
	if len(args) < 1 {
		ts.Fatalf("usage: writefile FILE [TEXT...]")
	}
	name := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Dir(name), 0o700))
	ts.Check(os.WriteFile(name, []byte(strings.Join(args[1:], " ")+"\n"), 0o600))
}

// cmdWaitstatus polls the status of the instance (with the given extra
// arguments, e.g. --database) until it succeeds, for instances that other
// commands of the script bring up in the background. Its stdout and stderr
// are those of the successful status.
func cmdWaitstatus(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitstatus")
	deadline := time.Now().Add(waitGuard)
	for {
		code := exitCode(ts, "deepcode", append([]string{"service", "status"}, args...)...)
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("deepcode service status still exits %d after %s", code, waitGuard)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cmdWaitfile waits for output that a background command writes to a file.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitfile")
	if len(args) != 2 {
		ts.Fatalf("usage: waitfile FILE REGEXP")
	}
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	name := ts.MkAbs(args[0])
	deadline := time.Now().Add(waitGuard)
	for {
		b, err := os.ReadFile(name)
		if err == nil && re.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s does not match %q after %s; it holds:\n%s", args[0], args[1], waitGuard, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cmdNoprocs(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "noprocs")
	if len(args) != 0 {
		ts.Fatalf("usage: noprocs")
	}
	kit := ts.Value(kitKey{}).(*testkit.Env)
	if pids := kit.Processes(); len(pids) > 0 {
		ts.Fatalf("processes still running with DEEPCODE_HOME=%s: %s", kit.Home, describe(pids))
	}
}

// describe names processes by pid and command line.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		parts = append(parts, fmt.Sprintf("%d (%s)", pid, bytes.TrimSpace(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))))
	}
	return strings.Join(parts, ", ")
}

// cmdWaitjson polls a command that prints JSON until the value at PATH is
// VALUE, for state that the service reaches in the background (a detached
// turn ending). Its stdout and stderr are those of the last run.
func cmdWaitjson(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "waitjson")
	if len(args) < 3 {
		ts.Fatalf("usage: waitjson PATH VALUE prog [args...]")
	}
	deadline := time.Now().Add(waitGuard)
	for {
		code := exitCode(ts, args[2], args[3:]...)
		got := ""
		if code == 0 {
			var v any
			if json.Unmarshal([]byte(ts.ReadFile("stdout")), &v) == nil {
				if x, ok := lookup(v, args[0]); ok {
					got = jsonText(x)
				}
			}
			if got == args[1] {
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s still exits %d with %s = %q after %s, want %q", args[2], code, args[0], got, waitGuard, args[1])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lookup is the value at a dotted path of object keys and array indexes.
func lookup(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			x, ok := c[k]
			if !ok {
				return nil, false
			}
			v = x
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func cmdPrefix(ts *testscript.TestScript, neg bool, args []string) {
	noNeg(ts, neg, "prefix")
	if len(args) != 3 {
		ts.Fatalf("usage: prefix VAR N VALUE")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 || n > len(args[2]) {
		ts.Fatalf("prefix: bad length %q for %q", args[1], args[2])
	}
	ts.Setenv(args[0], args[2][:n])
}
