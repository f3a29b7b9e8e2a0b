package gateway

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestContractLinkRegistry fails when the gateway's extras on its end of
// the manager's link (its LinkRPC) serve a method or handle a notification
// the contract lacks, or the contract lists one they do not, or a
// handler's types differ from the contract's.
func TestContractLinkRegistry(t *testing.T) {
	mux := rpc.NewMux()
	(&Gateway{}).linkMethods(mux)
	for _, err := range apitest.CheckLink(api.ServiceGateway, mux) {
		t.Error(err)
	}
}
