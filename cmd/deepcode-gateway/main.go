// Command deepcode-gateway is the instance's front door on 127.0.0.1.
package main

import (
	"github.com/deepcode-dev/deepcode/services/gateway"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() { service.Main(gateway.Spec()) }
