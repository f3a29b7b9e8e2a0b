package agentd

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestContractRegistry fails when agentd serves a method the contract
// lacks, or the contract lists one agentd does not serve, or a handler's
// types differ from the contract's.
func TestContractRegistry(t *testing.T) {
	mux := rpc.NewMux()
	(&Agentd{}).methods(mux)
	for _, err := range apitest.CheckServed(api.ServiceAgentd, mux) {
		t.Error(err)
	}
}
