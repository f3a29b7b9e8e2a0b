package service

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/api/apitest"
)

// TestContractLinkRegistry fails when what every service serves on its end
// of the manager's link differs from the contract's link methods of
// api.ServiceEvery, in names or in types.
func TestContractLinkRegistry(t *testing.T) {
	for _, err := range apitest.CheckLink(api.ServiceEvery, newLink(&Service{}).methods()) {
		t.Error(err)
	}
}
