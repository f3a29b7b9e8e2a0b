// Command deepcode-termhost hosts PTY terminals for threads, with bounded
// output windows a reconnecting client reads back by offset.
package main

import (
	"github.com/deepcode-dev/deepcode/services/termhost"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() { service.Main(termhost.Spec()) }
