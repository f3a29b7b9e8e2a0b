// Command deepcode-agentd owns agent turns: it runs them durably,
// independently of the clients that start them.
package main

import (
	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() { service.Main(agentd.Spec()) }
