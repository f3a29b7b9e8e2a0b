package supervisor

import (
	"path/filepath"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/activation"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

// testLayout is a database's layout under a temporary folder, with its
// service folder made.
func testLayout(t *testing.T) *paths.Layout {
	t.Helper()
	root := t.TempDir()
	l, err := paths.ResolveWith(func(k string) string {
		if k == paths.EnvRuntimeDir {
			return filepath.Join(root, "rt")
		}
		return ""
	}, root, filepath.Join(root, "db.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureServiceDir(); err != nil {
		t.Fatal(err)
	}
	return l
}

// The sockets a supervisor binds (on Windows: the pipes it checks and the
// services listen on) for one database: one per service present, never the
// TCP port, and each pipe named from the database id and the service.
func TestSocketsAndPipesOfADatabase(t *testing.T) {
	l := testLayout(t)
	want := []string{"manager", "gateway", "scheduler", "agentd", "termhost"}
	got := socketNames(Children)
	if len(got) != len(want) {
		t.Fatalf("sockets %v, want %v", got, want)
	}
	for i, name := range want {
		if got[i] != name {
			t.Fatalf("sockets %v, want %v", got, want)
		}
		pipe, err := activation.SocketPipe(l.Socket(name + ".sock"))
		if err != nil {
			t.Fatal(err)
		}
		if direct, _ := activation.PipeName(l.DBID, name); pipe != direct || pipe != `\\.\pipe\deepcode-`+l.DBID+"-"+name {
			t.Fatalf("pipe of %s: %q (by name %q)", name, pipe, direct)
		}
	}
	// Without the optional services, only the others' sockets.
	if got := socketNames([]Child{Children[0], Children[1]}); len(got) != 2 || got[0] != "manager" || got[1] != "gateway" {
		t.Fatalf("manager and gateway only: %v", got)
	}
}

// DEEPCODE_SERVICES tells the manager how each service starts: on demand
// where the supervisor hands listeners over, at once on Windows.
func TestServicesList(t *testing.T) {
	want := "gateway=always,scheduler=always,agentd=on-demand,termhost=on-demand"
	if !startsOnDemand {
		want = "gateway=always,scheduler=always,agentd=always,termhost=always"
	}
	if got := servicesList(Children); got != want {
		t.Fatalf("servicesList = %q, want %q", got, want)
	}
}
