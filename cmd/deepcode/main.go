// Command deepcode is the command-line client: it starts, inspects and stops
// the per-user service and talks to it.
package main

import (
	"os"

	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
