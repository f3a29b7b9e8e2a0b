package scheduler

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestContractRegistry fails when the scheduler serves a method the
// contract lacks, or the contract lists one it does not serve, or a
// handler's types differ from the contract's.
func TestContractRegistry(t *testing.T) {
	mux := rpc.NewMux()
	(&Scheduler{}).methods(mux)
	for _, err := range apitest.CheckServed(api.ServiceScheduler, mux) {
		t.Error(err)
	}
}
