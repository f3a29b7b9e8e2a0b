//go:build !windows

package windows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fake powershell.exe: logs its arguments and answers like the adapter.
const fakePowerShell = `#!/bin/sh
dir=$(dirname "$0")
printf '%s\n' "$*" >> "$dir/calls"
action=$9
case "$action" in
query) cat "$dir/state" 2>/dev/null || echo '{"installed":false}';;
register) printf '%s\n' '{"installed":true,"state":"Ready","execute":"C:\\Program Files\\deepcode\\libexec\\deepcode-supervisor.exe"}' > "$dir/state"; echo '{"registered":true}';;
unregister) rm -f "$dir/state"; echo '{"removed":true}';;
start) [ -f "$dir/state" ] || { echo "The system cannot find the file specified." >&2; exit 1; }; echo '{"started":true}';;
stop) echo '{"stopped":true}';;
esac
`

func TestAdapterWithFakePowerShell(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	ps := filepath.Join(bin, "powershell")
	if err := os.WriteFile(ps, []byte(fakePowerShell), 0o755); err != nil {
		t.Fatal(err)
	}
	svc := t.TempDir()
	a := &Adapter{PowerShell: ps, ServiceDir: svc}
	if err := a.Register(ctx); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("register without a configuration: %v", err)
	}
	c, _ := NewConfig(sampleTask())
	if err := WriteConfig(svc, c); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Query(ctx); err != nil || st.Installed {
		t.Fatalf("query before register: %+v %v", st, err)
	}
	if err := a.Start(ctx); err == nil || !strings.Contains(err.Error(), "cannot find the file") {
		t.Fatalf("start of an unregistered task: %v", err)
	}
	if err := a.Register(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := a.Query(ctx)
	if err != nil || !st.Installed || st.State != "Ready" || st.Running() {
		t.Fatalf("query: %+v %v", st, err)
	}
	for _, f := range []func(context.Context) error{a.Start, a.Stop, a.Unregister} {
		if err := f(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Doctor: configuration present, executable and home missing here.
	status := map[string]string{}
	for _, c := range Doctor(ctx, a, svc) {
		status[c.Name] = c.Status
	}
	if status["config"] != OK || status["executable"] != Fail || status["home"] != Fail || status["task"] != Fail {
		t.Fatalf("doctor: %v", status)
	}
	calls, _ := os.ReadFile(filepath.Join(bin, "calls"))
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	prefix := "-NoLogo -NoProfile -NonInteractive -ExecutionPolicy Bypass -File " + ScriptPath(svc) + " -Action "
	for i, action := range []string{"query", "start", "register", "query", "start", "stop", "unregister", "query"} {
		if lines[i] != prefix+action+" -ConfigPath "+ConfigPath(svc) {
			t.Fatalf("call %d: %s", i, lines[i])
		}
	}
}
