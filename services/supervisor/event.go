package supervisor

import "github.com/deepcode-dev/deepcode/shared/mgmt"

// StartupEvent is the start-up handshake line (see mgmt.StartupEvent).
type StartupEvent = mgmt.StartupEvent
