package manager

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
)

// TestContractRegistry fails when the manager's control endpoint serves a
// method the contract lacks, or the contract lists one it does not serve,
// or a handler's types differ from the contract's.
func TestContractRegistry(t *testing.T) {
	m := &Manager{}
	m.methods()
	for _, err := range apitest.CheckServed(api.ServiceManager, m.control) {
		t.Error(err)
	}
}
