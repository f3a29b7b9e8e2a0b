// Command deepcode-supervisor activates and supervises an instance where no
// service manager does.
package main

import (
	"os"

	"github.com/deepcode-dev/deepcode/services/supervisor"
	"github.com/deepcode-dev/deepcode/shared/activation"
)

func main() {
	activation.RunTrampoline() // must run first: it may become a service
	os.Exit(supervisor.Main(os.Args[1:]))
}
