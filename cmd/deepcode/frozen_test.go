//go:build linux

package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// installBinaries copies the built binaries into dir, appending tag to
// each so that every "release" has its own content.
func installBinaries(t *testing.T, from, dir, tag string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "deepcode") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// As a package manager does: write beside, rename over.
		tmp := filepath.Join(dir, "."+e.Name()+".new")
		if err := os.WriteFile(tmp, append(b, []byte("\n"+tag+"\n")...), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// supervisorExe is where the running instance's supervisor runs from.
func supervisorExe(t *testing.T, env *testkit.Env) string {
	t.Helper()
	pid := serviceStatus(t, env).PID
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestFrozenRuntimeCopies: `service start` runs the service from a
// private versioned copy; replacing (even deleting) the installed binaries
// does not break the running instance, whose on-demand services still
// start; the next start uses the new binaries, and the unused old copy is
// removed.
func TestFrozenRuntimeCopies(t *testing.T) {
	t.Parallel()
	installed := t.TempDir()
	installBinaries(t, testkit.Binaries(t), installed, "release-1")
	env := testkit.NewEnv(t, installed)
	env.Extra = append(env.Extra, "DEEPCODE_PORT=0", "DEEPCODE_RUNTIME_COPY=1")
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	runtimeRoot := filepath.Join(env.Home, "runtime")

	env.MustRun("service", "start")
	first := filepath.Dir(supervisorExe(t, env))
	if filepath.Dir(first) != runtimeRoot {
		t.Fatalf("the supervisor runs from %s, not from a copy in %s", first, runtimeRoot)
	}
	if fi, err := os.Stat(first); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("copy %s: %v %v", first, fi, err)
	}
	if _, err := os.Stat(filepath.Join(first, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if st := serviceStatus(t, env); st.Services["agentd"].PID != 0 {
		t.Fatalf("agentd already runs: %+v", st.Services["agentd"])
	}

	// The installed service binaries disappear (an updater mid-way): the
	// running instance still starts agentd on demand, from its copy.
	for _, name := range []string{"deepcode-supervisor", "deepcode-manager", "deepcode-gateway", "deepcode-scheduler", "deepcode-agentd", "deepcode-termhost"} {
		if err := os.Remove(filepath.Join(installed, name)); err != nil {
			t.Fatal(err)
		}
	}
	r := env.Run("exec", "--trust", "--workspace", ws, "--profile", "script", "say still working")
	if r.Code != 0 || r.Stdout != "still working\n" {
		t.Fatalf("exec after removing the installed binaries: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	agentd := serviceStatus(t, env).Services["agentd"].PID
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", agentd))
	if err != nil || filepath.Dir(exe) != first {
		t.Fatalf("agentd (pid %d) runs %s (%v), want it from %s", agentd, exe, err, first)
	}

	// The new release is installed; the old instance keeps working.
	installBinaries(t, testkit.Binaries(t), installed, "release-2")
	r = env.Run("exec", "--trust", "--workspace", ws, "--profile", "script", "say old instance")
	if r.Code != 0 || r.Stdout != "old instance\n" {
		t.Fatalf("exec with the new release installed: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if got := filepath.Dir(supervisorExe(t, env)); got != first {
		t.Fatalf("the instance moved to %s", got)
	}

	// The next start uses the new release; the old copy is unused, so it
	// goes.
	env.MustRun("service", "stop")
	env.MustRun("service", "start")
	second := filepath.Dir(supervisorExe(t, env))
	if second == first || filepath.Dir(second) != runtimeRoot {
		t.Fatalf("after the upgrade the supervisor runs from %s (first copy %s)", second, first)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("the unused old copy %s is still there (%v)", first, err)
	}
	r = env.Run("exec", "--trust", "--workspace", ws, "--profile", "script", "say new instance")
	if r.Code != 0 || r.Stdout != "new instance\n" {
		t.Fatalf("exec on the new release: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}

	// A second database's instance keeps its copy in use: a start of the
	// first one does not remove it.
	other := filepath.Join(env.Home, "other.sqlite3")
	env.MustRun("--database", other, "service", "start")
	installBinaries(t, testkit.Binaries(t), installed, "release-3")
	env.MustRun("service", "stop")
	env.MustRun("service", "start")
	third := filepath.Dir(supervisorExe(t, env))
	if third == second {
		t.Fatalf("release 3 runs from the copy of release 2")
	}
	if _, err := os.Stat(filepath.Join(second, "deepcode-supervisor")); err != nil {
		t.Fatalf("the copy still used by %s was removed: %v", other, err)
	}
	env.MustRun("--database", other, "service", "stop")
}
