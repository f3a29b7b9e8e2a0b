package launchd

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./launchd -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from the generated plist:\n%s", path, got)
	}
}

func sampleAgent() *Agent {
	return &Agent{
		DBID:             "k7q2m4x9a1b3",
		Program:          SupervisorProgram("/usr/local/libexec/deepcode/deepcode-supervisor", "/Users/ada/.deepcode/state/deepcode.sqlite3", 3081),
		WorkingDirectory: "/Users/ada/.deepcode",
		Home:             "/Users/ada/.deepcode",
		Path:             "/opt/homebrew/bin:/usr/bin:/bin",
		LogPath:          "/Users/ada/.deepcode/state/deepcode.service/service.log",
		Sockets: []Socket{
			{Name: "manager", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/manager.sock"},
			{Name: "gateway", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/gateway.sock"},
			{Name: "http", Port: 3081},
			{Name: "agentd", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/agentd.sock"},
			{Name: "termhost", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/termhost.sock"},
			{Name: "scheduler", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/scheduler.sock"},
		},
	}
}

func TestPlistGolden(t *testing.T) {
	got, err := sampleAgent().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "basic.plist", got)
}

// Paths with spaces, XML's special characters and non-ASCII letters are
// escaped by the plist encoder, never interpreted by a shell (launchd execs
// ProgramArguments directly).
func TestPlistGoldenAwkwardPaths(t *testing.T) {
	home := "/Users/José Ñandú/R&D <lab> \"q\" 'x'/日本語 $HOME %s"
	a := &Agent{
		DBID:             "zz9plural9za",
		Program:          SupervisorProgram("/Applications/Deep Code & Co/libexec/deepcode-supervisor", home+"/state/my db.sqlite3", 0),
		WorkingDirectory: home,
		Home:             home,
		Path:             "/Users/José Ñandú/bin:/usr/bin:/bin",
		LogPath:          home + "/state/my db.service/service.log",
		Sockets:          []Socket{{Name: "manager", Path: "/tmp/deepcode-501/zz9plural9za/manager.sock"}},
	}
	got, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "awkward.plist", got)
	for _, raw := range []string{"R&D", "<lab>"} {
		if strings.Contains(string(got), raw) {
			t.Fatalf("%q written unescaped", raw)
		}
	}
	back, err := Unmarshal(got)
	if err != nil {
		t.Fatal(err)
	}
	a.ExitTimeout = DefaultExitTimeout
	if !reflect.DeepEqual(back, a) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, a)
	}
}

func TestPlistKeepsCredentialsOut(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	t.Setenv("HTTPS_PROXY", "http://user:pw@proxy:3128")
	got, err := sampleAgent().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"sk-secret", "proxy", "API_KEY"} {
		if strings.Contains(string(got), s) {
			t.Fatalf("plist contains %q", s)
		}
	}
}

func TestWriteReadRemove(t *testing.T) {
	home := t.TempDir()
	a := sampleAgent()
	path := PlistPath(home, a.DBID)
	if path != filepath.Join(home, "Library", "LaunchAgents", "dev.deepcode.k7q2m4x9a1b3.plist") {
		t.Fatalf("plist path %s", path)
	}
	// Another LaunchAgent in the folder is never touched.
	other := filepath.Join(AgentsDir(home), "com.example.other.plist")
	if err := os.MkdirAll(AgentsDir(home), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, a); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plist mode: %v %v", fi, err)
	}
	back, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	a.ExitTimeout = DefaultExitTimeout
	want := *a
	want.Sockets = []Socket{ // read back sorted by name
		{Name: "agentd", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/agentd.sock"},
		{Name: "gateway", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/gateway.sock"},
		{Name: "http", Port: 3081},
		{Name: "manager", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/manager.sock"},
		{Name: "scheduler", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/scheduler.sock"},
		{Name: "termhost", Path: "/tmp/deepcode-501/k7q2m4x9a1b3/termhost.sock"},
	}
	if !reflect.DeepEqual(back, &want) {
		t.Fatalf("read back:\n got %+v\nwant %+v", back, &want)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Fatalf("removing a missing plist: %v", err)
	}
	if _, err := Read(path); err != ErrNotInstalled {
		t.Fatalf("read after remove: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("the other LaunchAgent was touched: %v", err)
	}
	entries, _ := os.ReadDir(AgentsDir(home))
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]func(a *Agent){
		"bad db id":         func(a *Agent) { a.DBID = "../x" },
		"relative program":  func(a *Agent) { a.Program = []string{"deepcode-supervisor"} },
		"no program":        func(a *Agent) { a.Program = nil },
		"no home":           func(a *Agent) { a.Home = "" },
		"relative log":      func(a *Agent) { a.LogPath = "service.log" },
		"duplicate socket":  func(a *Agent) { a.Sockets = append(a.Sockets, a.Sockets[0]) },
		"socket path long":  func(a *Agent) { a.Sockets[0].Path = "/" + strings.Repeat("x", 110) },
		"socket without it": func(a *Agent) { a.Sockets[0] = Socket{Name: "manager"} },
	}
	for name, mutate := range cases {
		a := sampleAgent()
		mutate(a)
		if _, err := a.Marshal(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUnmarshalRejectsForeignPlists(t *testing.T) {
	if _, err := Unmarshal([]byte(`<?xml version="1.0"?><plist version="1.0"><dict><key>Label</key><string>com.example.x</string></dict></plist>`)); err == nil {
		t.Fatal("a foreign label was accepted")
	}
	if _, err := Unmarshal([]byte("not a plist")); err == nil {
		t.Fatal("garbage was accepted")
	}
}
