// Command deepcode-manager is the instance's management plane.
package main

import (
	"github.com/deepcode-dev/deepcode/services/manager"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() { service.Main(manager.Spec()) }
