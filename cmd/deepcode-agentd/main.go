// Command deepcode-agentd owns agent turns: it runs them durably,
// independently of the clients that start them.
package main

import (
	"os"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/native"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() {
	// Started as the deepcode provider's sandbox helper, it restricts
	// itself and becomes the sandboxed command instead.
	native.SandboxMain()
	// The offline commands (rebuild, restore) of a stopped instance.
	if agentd.IsOffline(os.Args[1:]) {
		os.Exit(agentd.OfflineMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	service.Main(agentd.Spec())
}
