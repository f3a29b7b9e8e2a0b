package supervisor

import (
	"fmt"
	"os"

	"github.com/deepcode-dev/deepcode/shared/service"
)

// Main reports that the Windows supervisor is not built yet, and why it is
// more than swapping listeners: the Unix supervisor binds each socket once
// and hands the services inherited descriptors (LISTEN_FDS, through the
// exec trampoline), and it starts agentd and termhost when their socket
// first becomes readable. A go-winio named-pipe listener
// (activation.ListenPipe) is neither: it creates a new pipe instance per
// Accept in this process and cannot be inherited by a child. So on Windows
// every service must listen on its own pipe (shared/service and
// activation.Bind bind Unix-socket paths only), the client must dial pipes
// (activation.DialPipe; shared/client dials Unix sockets), and on-demand
// start needs the supervisor to accept the first connection and hand it
// over. Until then the logon task (windows/) can be installed but the
// instance it starts exits with this message.
func Main([]string) int {
	fmt.Fprintln(os.Stderr, "deepcode-supervisor: NOT_IMPLEMENTED: the Windows supervisor is not available yet: "+
		"named-pipe listeners cannot be passed to the services as the Unix supervisor passes sockets (LISTEN_FDS), "+
		"and the services and the CLI do not listen on or dial named pipes yet")
	return service.ExitConfig
}
