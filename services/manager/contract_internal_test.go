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

// TestContractLinkRegistry does the same for the manager's end of the link
// (what the services send it there).
func TestContractLinkRegistry(t *testing.T) {
	m := &Manager{}
	m.methods()
	for _, err := range apitest.CheckLink(api.ServiceManager, m.link) {
		t.Error(err)
	}
}
