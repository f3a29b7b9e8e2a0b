package manager

import "github.com/deepcode-dev/deepcode/shared/service"

// terminate asks the supervisor (pid) to stop the instance. Windows has no
// SIGTERM: the supervisor gave the manager a stop-request pipe, and stops
// every service in order when a byte arrives on it.
func terminate(pid int) error { return service.RequestSupervisorStop(pid) }
