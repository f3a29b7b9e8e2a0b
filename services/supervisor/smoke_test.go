//go:build !windows

package supervisor_test

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

func TestStartStatusStop(t *testing.T) {
	env := testkit.NewEnv(t, testkit.Binaries(t))
	var st struct {
		Running bool `json:"running"`
		mgmt.Status
	}
	env.MustRun("service", "start", "--port", "0", "--json").JSON(t, &st)
	if !st.Running || st.InstanceID == "" || st.Port == 0 || st.Services["gateway"].State != "running" {
		t.Fatalf("start: %+v", st)
	}
	r := env.Run("service", "stop", "--json")
	if r.Code != 0 {
		t.Fatalf("stop: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := env.Run("service", "status"); r.Code != 3 {
		t.Fatalf("status after stop: exit %d", r.Code)
	}
	if ps := env.Processes(); len(ps) != 0 {
		t.Fatalf("processes left behind: %v", ps)
	}
}
