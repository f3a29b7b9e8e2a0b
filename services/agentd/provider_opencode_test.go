package agentd_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestOpenCode drives the real OpenCode CLI (opencode serve, HTTP and
// server-sent events) through agentd against the fake model server's Chat
// Completions API.
func TestOpenCode(t *testing.T) {
	rig := runtimeSuite(t, "opencode")
	if t.Failed() {
		return
	}

	t.Run("private TMPDIR removed with the runtime", func(t *testing.T) {
		c := dial(t, rig.env)
		th := c.newThread("opencode")
		turn := c.start(th.ID, "say warm")
		c.waitEnded(th.ID, turn.ID)
		pids := rig.runtimePIDs()
		if len(pids) == 0 {
			t.Fatal("no warm runtime")
		}
		if runtime.GOOS == "linux" {
			// Each runtime has its own TMPDIR, inside agentd's.
			seen := map[string]bool{}
			for _, pid := range pids {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
				if err != nil {
					continue
				}
				for _, kv := range bytes.Split(b, []byte{0}) {
					if v, ok := strings.CutPrefix(string(kv), "TMPDIR="); ok {
						if filepath.Dir(v) != rig.tmp || !strings.HasPrefix(filepath.Base(v), "deepcode-opencode-") || seen[v] {
							t.Fatalf("runtime %d has TMPDIR %s", pid, v)
						}
						seen[v] = true
					}
				}
			}
			if len(seen) == 0 {
				t.Fatalf("no runtime has a private TMPDIR: %v", pids)
			}
		}
		// The killed agentd's leftovers were swept by its successor; the
		// live runtimes' folders go when they close (here: with agentd).
		rig.env.MustRun("service", "stop", "--cancel-running", "--timeout", "20")
		testkit.WaitFor(t, 30*time.Second, "the runtimes' TMPDIRs to be removed", func() bool {
			left, _ := filepath.Glob(filepath.Join(rig.tmp, "deepcode-opencode-*"))
			return len(left) == 0
		})
	})
}
