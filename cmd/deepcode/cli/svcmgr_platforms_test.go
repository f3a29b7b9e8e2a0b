//go:build !windows

package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/launchd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/windows"
)

// testInstall makes a layout in temporary folders, a service-binary folder
// holding stand-ins for every binary, and the record install would write.
func testInstall(t *testing.T) (*paths.Layout, installRecord) {
	t.Helper()
	root := t.TempDir()
	home := filepath.Join(root, "home")
	rt := filepath.Join(root, "rt")
	for _, d := range []string{home, rt, filepath.Join(root, "data"), filepath.Join(root, "libexec"), filepath.Join(root, "bin")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	getenv := func(k string) string {
		if k == paths.EnvRuntimeDir {
			return rt
		}
		return ""
	}
	l, err := paths.ResolveWith(getenv, home, filepath.Join(root, "data", "my db.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	libexec := filepath.Join(root, "libexec")
	for _, b := range append([]string{"supervisor"}, serviceBinaries...) {
		if err := os.WriteFile(filepath.Join(libexec, "deepcode-"+b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(root, "bin", "deepcode")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return l, installRecord{
		Manager: "launchd", DBID: l.DBID, Database: l.Database, Home: home, Executable: exe,
		Libexec: libexec, Path: "/opt/homebrew/bin:/usr/bin:/bin", Port: 3999, Version: "test",
	}
}

func TestLaunchdAgentFromLayout(t *testing.T) {
	l, rec := testInstall(t)
	a, err := launchdAgent(l, rec)
	if err != nil {
		t.Fatal(err)
	}
	wantProg := []string{filepath.Join(rec.Libexec, "deepcode-supervisor"), "--database", l.Database, "--port", "3999"}
	if !slices.Equal(a.Program, wantProg) {
		t.Fatalf("program %q, want %q", a.Program, wantProg)
	}
	if a.Label() != "dev.deepcode."+l.DBID || a.Home != rec.Home || a.Path != rec.Path || a.WorkingDirectory != rec.Home || a.LogPath != l.ServiceLog() {
		t.Fatalf("agent %+v", a)
	}
	want := map[string]launchd.Socket{"http": {Name: "http", Port: 3999}}
	for _, s := range []string{"manager", "gateway", "scheduler", "agentd", "termhost"} {
		want[s] = launchd.Socket{Name: s, Path: l.Socket(s + ".sock")}
	}
	if len(a.Sockets) != len(want) {
		t.Fatalf("sockets %+v", a.Sockets)
	}
	for _, s := range a.Sockets {
		if want[s.Name] != s {
			t.Fatalf("socket %+v, want %+v", s, want[s.Name])
		}
	}
	// Only DEEPCODE_HOME and PATH reach the plist, whatever this shell holds.
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	t.Setenv("HTTPS_PROXY", "http://proxy:3128")
	data, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"sk-secret", "proxy:3128", "OPENAI_API_KEY", "HTTPS_PROXY"} {
		if strings.Contains(string(data), leak) {
			t.Fatalf("the plist holds %q", leak)
		}
	}
	back, err := launchd.Unmarshal(data)
	if err != nil || !slices.Equal(back.Program, a.Program) || back.Home != a.Home || back.Path != a.Path || len(back.Sockets) != len(a.Sockets) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// A port of 0 cannot be activated by launchd: install requires 1-65535.
	rec.Port = 0
	if _, err := launchdAgent(l, rec); errs.CodeOf(err) != errs.ConfigInvalid {
		t.Fatalf("port 0: %v", err)
	}
}

// fakeLaunchctl stands in for launchctl (as in launchd's own tests): it logs
// its arguments and keeps the loaded plist's path in a file.
const fakeLaunchctl = `#!/bin/sh
dir=$(dirname "$0")
printf '%s\n' "$*" >> "$dir/calls"
case "$1" in
print)
  case "$2" in
  gui/501) echo "gui/501 = {"; echo "}"; exit 0;;
  esac
  [ -f "$dir/loaded" ] || { echo "Could not find service" >&2; exit 113; }
  printf '%s = {\n\tpath = %s\n\tstate = running\n\tpid = 4242\n}\n' "$2" "$(cat "$dir/loaded")"
  ;;
bootstrap)
  [ -f "$dir/loaded" ] && { echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; }
  [ -f "$dir/fail" ] && { echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; }
  echo "$3" > "$dir/loaded"
  ;;
bootout)
  [ -f "$dir/loaded" ] || { echo "Boot-out failed: 3: No such process" >&2; exit 3; }
  rm -f "$dir/loaded"
  ;;
kickstart)
  [ -f "$dir/loaded" ] || { echo "Could not find service" >&2; exit 113; }
  ;;
*) exit 64;;
esac
`

func TestLaunchdManagerLifecycle(t *testing.T) {
	ctx := context.Background()
	l, rec := testInstall(t)
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "launchctl"), []byte(fakeLaunchctl), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := func() string { b, _ := os.ReadFile(filepath.Join(fake, "calls")); return string(b) }
	userHome, configHome := t.TempDir(), t.TempDir()
	m := &launchdManager{layout: l, userHome: userHome, configHome: configHome,
		ctl: &launchd.Launchctl{Path: filepath.Join(fake, "launchctl"), UID: 501}}
	plistPath := filepath.Join(userHome, "Library", "LaunchAgents", "dev.deepcode."+l.DBID+".plist")

	if got, err := m.Installed(); got != nil || err != nil {
		t.Fatalf("installed before install: %+v %v", got, err)
	}
	res, err := m.Install(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || !slices.Contains(res.Files, plistPath) || !slices.Contains(res.Files, m.recordFile()) {
		t.Fatalf("install: %+v", res)
	}
	if fi, err := os.Stat(plistPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plist: %v %v", fi, err)
	}
	if c := calls(); strings.Contains(c, "bootstrap") || strings.Contains(c, "kickstart") {
		t.Fatalf("install must not load or start anything: %q", c)
	}
	if got, err := m.Installed(); err != nil || got == nil || got.Port != 3999 || got.InstalledAt.IsZero() {
		t.Fatalf("record: %+v %v", got, err)
	}
	if res, err := m.Install(ctx, rec); err != nil || res.Changed {
		t.Fatalf("second install: %+v %v", res, err)
	}

	// Start creates the sockets' folder, loads the job and kicks it.
	if err := os.RemoveAll(l.RuntimeDir); err != nil {
		t.Fatal(err)
	}
	got, _ := m.Installed()
	if err := m.Start(ctx, got); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.RuntimeDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("runtime dir: %v %v", fi, err)
	}
	if c := calls(); !strings.Contains(c, "bootstrap gui/501 "+plistPath+"\n") || !strings.Contains(c, "kickstart gui/501/dev.deepcode."+l.DBID+"\n") {
		t.Fatalf("start calls: %q", c)
	}
	if on, err := m.Active(ctx, got); err != nil || !on {
		t.Fatalf("active: %v %v", on, err)
	}
	// A loaded job's definition is not changed under it.
	rec2 := rec
	rec2.Port = 4000
	if _, err := m.Install(ctx, rec2); errs.CodeOf(err) != errs.Conflict {
		t.Fatalf("install over a loaded job: %v", err)
	}
	// Doctor: everything present; no failure.
	checks := m.Doctor(ctx, got)
	names := map[string]string{}
	for _, c := range checks {
		names[c.Name] = c.Status
		if c.Status == checkFail {
			t.Errorf("doctor: %+v", c)
		}
	}
	for _, n := range []string{"installed", "executable", "services", "database", "plist", "directory", "gui-domain", "job", "current", "runtime"} {
		if names[n] == "" {
			t.Errorf("doctor has no %q check: %+v", n, checks)
		}
	}

	// Stop boots the job out, so launchd does not restart it; a second stop
	// is not an error.
	for range 2 {
		if err := m.Stop(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	if on, _ := m.Active(ctx, got); on {
		t.Fatal("active after stop")
	}
	if res, err := m.Install(ctx, rec2); err != nil || !res.Changed {
		t.Fatalf("install with another port once stopped: %+v %v", res, err)
	}
	if a, err := launchd.Read(plistPath); err != nil || a.Program[len(a.Program)-1] != "4000" {
		t.Fatalf("plist after reinstall: %+v %v", a, err)
	}
	if got, _ := m.Installed(); got.Port != 4000 {
		t.Fatalf("record after reinstall: %+v", got)
	}

	// A bootstrap that fails because the port is taken says so.
	if err := os.WriteFile(filepath.Join(fake, "fail"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, got); errs.CodeOf(err) != errs.StartFailed {
		t.Fatalf("failed bootstrap: %v", err)
	}

	// Doctor notices an edited plist.
	if err := os.WriteFile(plistPath, []byte("not a plist"), 0o600); err != nil {
		t.Fatal(err)
	}
	fails := 0
	for _, c := range m.Doctor(ctx, got) {
		if c.Status == checkFail {
			fails++
		}
	}
	if fails == 0 {
		t.Fatal("doctor passed an edited plist")
	}

	removed, err := m.Uninstall(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, plistPath) || !slices.Contains(removed, m.recordFile()) {
		t.Fatalf("uninstall removed %q", removed)
	}
	for _, p := range []string{plistPath, m.recordFile(), filepath.Join(configHome, "deepcode")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", p, err)
		}
	}
	if got, err := m.Installed(); got != nil || err != nil {
		t.Fatalf("installed after uninstall: %+v %v", got, err)
	}
}

func TestWindowsTaskFromRecord(t *testing.T) {
	rec := installRecord{DBID: "k7q2m4x9a1b3", Database: `C:\Users\Ada Lovelace\.deepcode\state\deepcode.sqlite3`,
		Home: `C:\Users\Ada Lovelace\.deepcode`, Path: `C:\Windows\system32;C:\Windows`, Port: 3081}
	task := windowsTask(rec, "S-1-5-21-1-2-3-1001", `C:\Program Files\deepcode\deepcode-supervisor.exe`)
	c, err := windows.NewConfig(task)
	if err != nil {
		t.Fatal(err)
	}
	if c.TaskName != "deepcode-k7q2m4x9a1b3" || c.Executable != `C:\Program Files\deepcode\deepcode-supervisor.exe` ||
		!slices.Equal(c.Arguments, []string{"--database", rec.Database, "--port", "3081"}) {
		t.Fatalf("config %+v", c)
	}
	if env := c.Environ(); !slices.Equal(env, []string{`DEEPCODE_HOME=` + rec.Home, `PATH=` + rec.Path}) {
		t.Fatalf("environment %q", env)
	}
	if !strings.Contains(c.TaskXML, "<UserId>S-1-5-21-1-2-3-1001</UserId>") {
		t.Fatalf("task XML:\n%s", c.TaskXML)
	}
	// The task's doctor checks map one to one (same statuses).
	got := fromWindowsChecks(windows.Doctor(context.Background(), nil, t.TempDir()))
	if len(got) != 1 || got[0].Name != "config" || got[0].Status != checkFail {
		t.Fatalf("doctor of a missing task: %+v", got)
	}
}

func TestInstallRecordKeepsFirstInstall(t *testing.T) {
	path := installRecordPath(t.TempDir(), "abc")
	rec := installRecord{DBID: "abc", Executable: "/usr/bin/deepcode", Version: "1", Port: 3081}
	if wrote, err := saveInstallRecord(path, rec, true); err != nil || !wrote {
		t.Fatalf("first save: %v %v", wrote, err)
	}
	first, err := readInstallRecord(path, "abc")
	if err != nil || first == nil || first.InstalledAt.IsZero() {
		t.Fatalf("read: %+v %v", first, err)
	}
	if wrote, err := saveInstallRecord(path, rec, false); err != nil || wrote {
		t.Fatalf("unchanged save: %v %v", wrote, err)
	}
	rec.Port = 4000
	if wrote, err := saveInstallRecord(path, rec, true); err != nil || !wrote {
		t.Fatalf("changed save: %v %v", wrote, err)
	}
	if got, _ := readInstallRecord(path, "abc"); got.Port != 4000 || !got.InstalledAt.Equal(first.InstalledAt) {
		t.Fatalf("after change: %+v (first %v)", got, first.InstalledAt)
	}
	if _, err := readInstallRecord(path, "other"); errs.CodeOf(err) != errs.ConfigInvalid {
		t.Fatalf("record of another database: %v", err)
	}
	if !removeInstallRecord(path) || removeInstallRecord(path) {
		t.Fatal("remove")
	}
}
