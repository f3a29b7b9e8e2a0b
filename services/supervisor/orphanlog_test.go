//go:build !windows

package supervisor_test

import (
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestOrphanedServicesStillLog: a service's stderr is its supervisor's pipe,
// so once the supervisor is SIGKILLed what the service says next ("the
// supervisor is gone; stopping", its stop) reaches service.log only because
// the service then writes to the file itself.
func TestOrphanedServicesStillLog(t *testing.T) {
	bin := testkit.Binaries(t)
	becomeSubreaper(t)
	env := newEnv(t, bin)
	st := start(t, env, "--port", "0")
	pids := map[string]int{"manager": st.Services["manager"].PID, "gateway": st.Services["gateway"].PID}
	kill9(t, st.PID)
	reap(t, st.PID)
	for _, pid := range pids {
		if ws := reap(t, pid); !ws.Exited() {
			t.Errorf("pid %d ended with %v", pid, ws)
		}
	}
	waitNoProcesses(t, env)

	lines, err := logging.Tail(env.Layout("").ServiceLog(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for name := range pids {
		var gone, stopped bool
		for _, r := range logging.Records(lines, logging.Filter{Services: []string{name}}) {
			if r.Service != name {
				continue
			}
			gone = gone || strings.HasPrefix(r.Msg, "the supervisor is gone")
			stopped = stopped || r.Msg == "stopped"
		}
		if !gone || !stopped {
			t.Errorf("the orphaned %s's last records are not in service.log (gone %v, stopped %v):\n%s", name, gone, stopped, strings.Join(lines, "\n"))
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "map[") {
			t.Errorf("a Go map dump in the log: %s", l)
		}
	}
}
