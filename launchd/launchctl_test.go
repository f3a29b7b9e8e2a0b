//go:build !windows

package launchd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeLaunchctl is a shell script standing in for launchctl: it logs its
// arguments and keeps the loaded state in a file, answering print,
// bootstrap, bootout and kickstart like macOS 14's launchctl.
const fakeLaunchctl = `#!/bin/sh
dir=$(dirname "$0")
printf '%s\n' "$*" >> "$dir/calls"
case "$1" in
print)
  case "$2" in
  gui/501) [ -f "$dir/nogui" ] && { echo "Bad request." >&2; exit 113; }; echo "gui/501 = {"; echo "}"; exit 0;;
  esac
  [ -f "$dir/loaded" ] || { echo "Could not find service \"${2##*/}\" in domain for port" >&2; exit 113; }
  printf '%s = {\n\tactive count = 1\n\tpath = %s\n\ttype = LaunchAgent\n\tstate = running\n\n\tprogram = /usr/local/libexec/deepcode/deepcode-supervisor\n\targuments = {\n\t\t/usr/local/libexec/deepcode/deepcode-supervisor\n\t\tpid = 999\n\t}\n\n\truns = 2\n\tpid = 4242\n\tlast exit code = (never exited)\n}\n' "$2" "$(cat "$dir/loaded")"
  ;;
bootstrap)
  [ -f "$dir/loaded" ] && { echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; }
  [ -f "$3" ] || { echo "Bootstrap failed: 2: No such file or directory" >&2; exit 2; }
  echo "$3" > "$dir/loaded"
  ;;
bootout)
  [ -f "$dir/loaded" ] || { echo "Boot-out failed: 3: No such process" >&2; exit 3; }
  rm -f "$dir/loaded"
  ;;
kickstart)
  [ -f "$dir/loaded" ] || { echo "Could not find service" >&2; exit 113; }
  ;;
*) echo "unknown subcommand $1" >&2; exit 64;;
esac
`

func newFake(t *testing.T) (*Launchctl, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "launchctl")
	if err := os.WriteFile(path, []byte(fakeLaunchctl), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Launchctl{Path: path, UID: 501}, dir
}

func calls(t *testing.T, dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "calls"))
	return string(b)
}

func TestLaunchctlLifecycle(t *testing.T) {
	ctx := context.Background()
	ctl, dir := newFake(t)
	home := t.TempDir()
	a := sampleAgent()
	plistPath := PlistPath(home, a.DBID)
	if err := Write(plistPath, a); err != nil {
		t.Fatal(err)
	}
	label := a.Label()
	if _, err := ctl.Print(ctx, label); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("print before bootstrap: %v", err)
	}
	if err := ctl.Bootout(ctx, label); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("bootout of an unloaded job: %v", err)
	}
	if err := ctl.Kickstart(ctx, label, false); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("kickstart of an unloaded job: %v", err)
	}
	if err := ctl.Bootstrap(ctx, plistPath, label); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Bootstrap(ctx, plistPath, label); err != nil {
		t.Fatalf("bootstrap of a loaded job should be a no-op: %v", err)
	}
	job, err := ctl.Print(ctx, label)
	if err != nil {
		t.Fatal(err)
	}
	want := Job{State: "running", PID: 4242, Path: plistPath, Program: "/usr/local/libexec/deepcode/deepcode-supervisor", LastExit: "(never exited)", Runs: 2}
	if *job != want || !job.Running() {
		t.Fatalf("print: %+v, want %+v", *job, want)
	}
	if err := ctl.Kickstart(ctx, label, true); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Bootout(ctx, label); err != nil {
		t.Fatal(err)
	}
	wantCalls := strings.Join([]string{
		"print gui/501/dev.deepcode.k7q2m4x9a1b3",
		"bootout gui/501/dev.deepcode.k7q2m4x9a1b3",
		"kickstart gui/501/dev.deepcode.k7q2m4x9a1b3",
		"print gui/501/dev.deepcode.k7q2m4x9a1b3",
		"bootstrap gui/501 " + plistPath,
		"print gui/501/dev.deepcode.k7q2m4x9a1b3",
		"print gui/501/dev.deepcode.k7q2m4x9a1b3",
		"kickstart -k gui/501/dev.deepcode.k7q2m4x9a1b3",
		"bootout gui/501/dev.deepcode.k7q2m4x9a1b3",
	}, "\n") + "\n"
	if got := calls(t, dir); got != wantCalls {
		t.Fatalf("launchctl calls:\n%s\nwant:\n%s", got, wantCalls)
	}
}

func TestBootstrapFailureIsReported(t *testing.T) {
	ctl, _ := newFake(t)
	err := ctl.Bootstrap(context.Background(), "/nonexistent/x.plist", "dev.deepcode.abc")
	if err == nil || !strings.Contains(err.Error(), "No such file") {
		t.Fatalf("bootstrap of a missing plist: %v", err)
	}
}

func TestMissingLaunchctl(t *testing.T) {
	ctl := &Launchctl{Path: filepath.Join(t.TempDir(), "nope"), UID: 501}
	if _, err := ctl.Print(context.Background(), "dev.deepcode.abc"); err == nil || errors.Is(err, ErrNotLoaded) {
		t.Fatalf("missing launchctl: %v", err)
	}
}

func TestDoctor(t *testing.T) {
	ctx := context.Background()
	ctl, dir := newFake(t)
	home := t.TempDir()
	exe := filepath.Join(home, "libexec", "deepcode-supervisor")
	a := sampleAgent()
	a.Program[0] = exe
	a.Home = filepath.Join(home, "dc home")
	a.WorkingDirectory = a.Home
	a.LogPath = filepath.Join(a.Home, "state", "deepcode.service", "service.log")
	for i := range a.Sockets {
		if a.Sockets[i].Path != "" {
			a.Sockets[i].Path = filepath.Join(home, "run", a.Sockets[i].Name+".sock")
		}
	}
	plistPath := PlistPath(home, a.DBID)

	status := func(checks []Check) map[string]string {
		m := map[string]string{}
		for _, c := range checks {
			m[c.Name] = c.Status
		}
		return m
	}
	got := status(Doctor(ctx, ctl, plistPath))
	if got["plist"] != Fail || got["gui-domain"] != OK || got["job"] != Warn {
		t.Fatalf("not installed: %v", got)
	}

	if err := Write(plistPath, a); err != nil {
		t.Fatal(err)
	}
	got = status(Doctor(ctx, ctl, plistPath))
	want := map[string]string{"plist": OK, "executable": Fail, "directory": Fail, "home": Fail, "gui-domain": OK, "job": Warn}
	if !equal(got, want) {
		t.Fatalf("nothing on disk: %v, want %v", got, want)
	}

	for _, d := range []string{filepath.Dir(exe), filepath.Dir(a.LogPath), filepath.Join(home, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Bootstrap(ctx, plistPath, a.Label()); err != nil {
		t.Fatal(err)
	}
	checks := Doctor(ctx, ctl, plistPath)
	got = status(checks)
	// The fake job runs another program than the plist records.
	want = map[string]string{"plist": OK, "executable": OK, "directory": OK, "home": OK, "gui-domain": OK, "job": Warn}
	if !equal(got, want) {
		t.Fatalf("installed: %v, want %v (%+v)", got, want, checks)
	}

	if err := os.WriteFile(filepath.Join(dir, "nogui"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := status(Doctor(ctx, ctl, plistPath)); got["gui-domain"] != Fail {
		t.Fatalf("no GUI domain: %v", got)
	}
	if err := os.Chmod(plistPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := status(Doctor(ctx, nil, plistPath)); got["plist"] != Warn {
		t.Fatalf("a readable plist: %v", got)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
