//go:build !windows

package paths

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaultLayout(t *testing.T) {
	home := t.TempDir()
	rt := t.TempDir()
	l, err := ResolveWith(env(map[string]string{EnvRuntimeDir: rt}), home, "")
	if err != nil {
		t.Fatal(err)
	}
	if l.Database != filepath.Join(home, "state", "deepcode.sqlite3") {
		t.Fatalf("default database %s", l.Database)
	}
	if l.ServiceDir != filepath.Join(home, "state", "deepcode.service") {
		t.Fatalf("service dir %s", l.ServiceDir)
	}
	fi, err := os.Stat(filepath.Join(home, "state"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state folder not created private: %v %v", err, fi)
	}
	for name, got := range map[string]string{
		"instance.lock": l.InstanceLock(), "instance.json": l.InstanceJSON(), "token": l.Token(),
		"service.log": l.ServiceLog(), "management.lock": l.ManagementLock(),
	} {
		if got != filepath.Join(l.ServiceDir, name) {
			t.Errorf("%s at %s", name, got)
		}
	}
	if l.Socket(ManagerSocket) != filepath.Join(rt, l.DBID, "manager.sock") {
		t.Fatalf("socket %s", l.Socket(ManagerSocket))
	}
}

func TestDatabaseIDIsStableShortAndDistinct(t *testing.T) {
	a, b := DatabaseID("/x/a.sqlite3"), DatabaseID("/x/b.sqlite3")
	if a != DatabaseID("/x/a.sqlite3") || a == b || len(a) != 12 || strings.ToLower(a) != a {
		t.Fatalf("ids %q %q", a, b)
	}
}

func TestSymlinkedFolderGivesOneIdentity(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	g := env(map[string]string{EnvRuntimeDir: t.TempDir()})
	a, err := ResolveWith(g, dir, filepath.Join(real, "db.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ResolveWith(g, dir, filepath.Join(link, "db.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	if a.DBID != b.DBID || a.ServiceDir != b.ServiceDir {
		t.Fatalf("two spellings, two instances: %+v %+v", a, b)
	}
}

func TestInvalidDatabasePaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	g := env(map[string]string{EnvRuntimeDir: t.TempDir()})
	cases := map[string]string{
		"missing folder":   filepath.Join(dir, "missing", "db.sqlite3"),
		"parent is a file": filepath.Join(file, "db.sqlite3"),
		"path is a folder": dir,
		"trailing slash":   dir + "/x/",
	}
	for name, p := range cases {
		_, err := ResolveWith(g, dir, p)
		if errs.CodeOf(err) != errs.InvalidDatabasePath {
			t.Errorf("%s: %v, want INVALID_DATABASE_PATH", name, err)
		}
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, err := ResolveWith(g, dir, filepath.Join(ro, "db.sqlite3")); errs.CodeOf(err) != errs.InvalidDatabasePath {
			t.Errorf("unwritable folder: %v", err)
		}
	}
}

func TestRuntimeDirChecks(t *testing.T) {
	base := t.TempDir()
	g := env(map[string]string{EnvRuntimeDir: base})
	l, err := ResolveWith(g, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureRuntimeDir(); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(l.RuntimeDir)
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("runtime dir mode %v", fi.Mode().Perm())
	}
	// A widened folder is tightened again.
	if err := os.Chmod(l.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureRuntimeDir(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(l.RuntimeDir); fi.Mode().Perm() != 0o700 {
		t.Fatalf("not tightened: %v", fi.Mode().Perm())
	}
	// A symlink in its place is refused.
	if err := os.RemoveAll(l.RuntimeDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), l.RuntimeDir); err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureRuntimeDir(); errs.CodeOf(err) != errs.RuntimeDirInsecure {
		t.Fatalf("symlinked runtime dir: %v", err)
	}
}

func TestRuntimeDirOwnedBySomeoneElseIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a folder owned by another user needs root")
	}
	base := t.TempDir()
	l, err := ResolveWith(env(map[string]string{EnvRuntimeDir: base}), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(l.RuntimeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(l.RuntimeDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err = l.EnsureRuntimeDir()
	if errs.CodeOf(err) != errs.RuntimeDirInsecure || !strings.Contains(err.Error(), "belongs to user 65534") {
		t.Fatalf("foreign runtime dir: %v", err)
	}
}

// TestXDGRuntimeDirMustBePrivate: the session folder above deepcode's is
// checked too, and refused (not changed) when others can use it.
func TestXDGRuntimeDirMustBePrivate(t *testing.T) {
	xdg := t.TempDir()
	resolve := func() *Layout {
		t.Helper()
		l, err := ResolveWith(env(map[string]string{"XDG_RUNTIME_DIR": xdg}), t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if err := os.Chmod(xdg, 0o755); err != nil {
		t.Fatal(err)
	}
	err := resolve().EnsureRuntimeDir()
	if errs.CodeOf(err) != errs.RuntimeDirInsecure || !strings.Contains(err.Error(), "open to others (mode 0755") {
		t.Fatalf("a 0755 XDG_RUNTIME_DIR: %v", err)
	}
	if fi, _ := os.Stat(xdg); fi.Mode().Perm() != 0o755 {
		t.Fatalf("the session folder was changed to %v", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(xdg, "deepcode")); !os.IsNotExist(err) {
		t.Fatalf("something was created in a refused session folder: %v", err)
	}
	if err := os.Chmod(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := resolve().EnsureRuntimeDir(); err != nil {
		t.Fatalf("a private XDG_RUNTIME_DIR: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(xdg, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		err := resolve().EnsureRuntimeDir()
		if errs.CodeOf(err) != errs.RuntimeDirInsecure || !strings.Contains(err.Error(), "belongs to user 65534") {
			t.Fatalf("a foreign XDG_RUNTIME_DIR: %v", err)
		}
	}
	// An explicit DEEPCODE_RUNTIME_DIR is not under the session's rules.
	if err := os.Chmod(xdg, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := ResolveWith(env(map[string]string{"XDG_RUNTIME_DIR": xdg, EnvRuntimeDir: t.TempDir()}), t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureRuntimeDir(); err != nil {
		t.Fatalf("DEEPCODE_RUNTIME_DIR with a loose XDG_RUNTIME_DIR: %v", err)
	}
}

func TestRuntimeDirFallbacksAndSunPathLimit(t *testing.T) {
	xdg := "/run/user/1000"
	got, err := runtimeDir(env(map[string]string{"XDG_RUNTIME_DIR": xdg}), "abcdefabcdef")
	if err != nil || got != "/run/user/1000/deepcode/abcdefabcdef" {
		t.Fatalf("xdg: %q %v", got, err)
	}
	got, err = runtimeDir(env(nil), "abcdefabcdef")
	if err != nil || !strings.HasPrefix(got, "/tmp/deepcode-") {
		t.Fatalf("fallback: %q %v", got, err)
	}
	long := "/" + strings.Repeat("x", 120)
	got, err = runtimeDir(env(map[string]string{"XDG_RUNTIME_DIR": long}), "abcdefabcdef")
	if err != nil || !strings.HasPrefix(got, "/tmp/deepcode-") {
		t.Fatalf("a too-long XDG_RUNTIME_DIR should fall back: %q %v", got, err)
	}
	if _, err := runtimeDir(env(map[string]string{EnvRuntimeDir: long}), "abcdefabcdef"); errs.CodeOf(err) != errs.RuntimeDirInsecure {
		t.Fatalf("too-long explicit runtime dir: %v", err)
	}
}

// On macOS, without XDG_RUNTIME_DIR, sockets go to a folder that survives a
// reboot (a LaunchAgent's sockets are created there at login), unless its
// path is too long for sun_path.
func TestPersistentRuntimeBase(t *testing.T) {
	saved := persistentRuntimeBase
	t.Cleanup(func() { persistentRuntimeBase = saved })
	persistentRuntimeBase = func(getenv func(string) string) string { return libraryCachesBase(getenv("HOME")) }

	got, err := runtimeDir(env(map[string]string{"HOME": "/Users/ada"}), "abcdefabcdef")
	if err != nil || got != "/Users/ada/Library/Caches/deepcode-run/abcdefabcdef" {
		t.Fatalf("got %q, %v", got, err)
	}
	got, err = runtimeDir(env(map[string]string{"HOME": "/Users/ada", "XDG_RUNTIME_DIR": "/run/user/501"}), "abcdefabcdef")
	if err != nil || got != "/run/user/501/deepcode/abcdefabcdef" {
		t.Fatalf("XDG_RUNTIME_DIR first: got %q, %v", got, err)
	}
	long := "/Users/" + strings.Repeat("a", 80)
	got, err = runtimeDir(env(map[string]string{"HOME": long}), "abcdefabcdef")
	if err != nil || got != filepath.Join(fallbackBase(), "abcdefabcdef") {
		t.Fatalf("a long home falls back: got %q, %v", got, err)
	}
	if libraryCachesBase("relative/home") != "" || libraryCachesBase("") != "" {
		t.Fatal("a relative or empty HOME gives a base")
	}
}

// TestLocateCreatesNothing: the read-only resolution (service status) of a
// home that does not exist, or of a database in a missing folder, creates
// no folder and no file, and gives the same paths Resolve would.
func TestLocateCreatesNothing(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home", "nope")
	g := env(map[string]string{EnvRuntimeDir: filepath.Join(root, "rt")})
	l, err := LocateWith(g, home, "")
	if err != nil {
		t.Fatal(err)
	}
	if l.Database != filepath.Join(home, "state", "deepcode.sqlite3") || l.Exists() {
		t.Fatalf("default database %s (exists %v)", l.Database, l.Exists())
	}
	if l.DBID != DatabaseID(l.Database) || l.Socket(ManagerSocket) != filepath.Join(root, "rt", l.DBID, "manager.sock") {
		t.Fatalf("layout %+v", l)
	}
	explicit := filepath.Join(root, "x", "nope", "db.sqlite")
	l, err = LocateWith(g, home, explicit)
	if err != nil {
		t.Fatal(err)
	}
	if l.Database != explicit || l.ServiceDir != filepath.Join(root, "x", "nope", "db.service") || l.Exists() {
		t.Fatalf("explicit layout %+v (exists %v)", l, l.Exists())
	}
	// A file where a folder should be is a folder that does not exist.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err = LocateWith(g, home, filepath.Join(file, "db.sqlite")); err != nil || l.Exists() {
		t.Fatalf("database under a file: %v (exists %v)", err, l != nil && l.Exists())
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "file" {
		t.Fatalf("Locate created something in %s: %v", root, ents)
	}
	// Resolve, by contrast, refuses the missing folder.
	if _, err := ResolveWith(g, home, explicit); errs.CodeOf(err) != errs.InvalidDatabasePath {
		t.Fatalf("Resolve of a missing folder: %v", err)
	}
	// And an existing folder gives the same layout both ways.
	db := filepath.Join(root, "db.sqlite3")
	a, err := ResolveWith(g, home, db)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LocateWith(g, home, db)
	if err != nil || *a != *b || !b.Exists() {
		t.Fatalf("Resolve %+v, Locate %+v (%v)", a, b, err)
	}
}
