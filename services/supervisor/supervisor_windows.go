package supervisor

import (
	"fmt"
	"os"

	"github.com/deepcode-dev/deepcode/shared/service"
)

// Main reports that the Windows supervisor (named pipes, Task Scheduler) is
// not built yet.
func Main([]string) int {
	fmt.Fprintln(os.Stderr, "deepcode-supervisor: NOT_IMPLEMENTED: the Windows supervisor (named pipes under Task Scheduler) is not available yet")
	return service.ExitConfig
}
