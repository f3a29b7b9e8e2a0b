package termhost

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestContractRegistry fails when termhost serves a method the contract
// lacks, or the contract lists one termhost does not serve, or a handler's
// types differ from the contract's.
func TestContractRegistry(t *testing.T) {
	mux := rpc.NewMux()
	(&Termhost{}).methods(mux)
	for _, err := range apitest.CheckServed(api.ServiceTermhost, mux) {
		t.Error(err)
	}
}
