// Package topology is the one list of deepcode's services: their names,
// whether they start on demand, and their sockets (the listener and
// LISTEN_FDNAMES name, the file in the runtime folder, the systemd socket
// unit). The supervisor, the systemd units, the LaunchAgent, discovery and
// the CLI's service manager all read it, so adding or renaming a service is
// one edit.
package topology

import "github.com/deepcode-dev/deepcode/shared/paths"

// Socket is one listener of a service.
type Socket struct {
	// Name is the listener's name: LISTEN_FDNAMES under systemd, the key of
	// the LaunchAgent's Sockets, the supervisor's listener name.
	Name string
	// File is the socket's file name in the runtime folder; "" for the
	// gateway's TCP port.
	File string
	// Unit is the systemd socket unit's base name (deepcode-<Unit>@.socket).
	Unit string
}

// Service is one deepcode service.
type Service struct {
	Name string
	// OnDemand services start on their first connection and exit when idle.
	OnDemand bool
	Sockets  []Socket
}

// Binary is the service's executable name.
func (s Service) Binary() string { return "deepcode-" + s.Name }

// Services lists every service in start order (they stop in reverse).
var Services = []Service{
	{Name: "manager", Sockets: []Socket{{Name: "manager", File: paths.ManagerSocket, Unit: "manager"}}},
	{Name: "gateway", Sockets: []Socket{{Name: "gateway", File: paths.GatewaySocket, Unit: "gateway"}, {Name: "http", Unit: "gateway-http"}}},
	{Name: "scheduler", Sockets: []Socket{{Name: "scheduler", File: paths.SchedulerSocket, Unit: "scheduler"}}},
	{Name: "agentd", OnDemand: true, Sockets: []Socket{{Name: "agentd", File: paths.AgentdSocket, Unit: "agentd"}}},
	{Name: "termhost", OnDemand: true, Sockets: []Socket{{Name: "termhost", File: paths.TermhostSocket, Unit: "termhost"}}},
}

// Names are the services' names in start order.
func Names() []string {
	out := make([]string, len(Services))
	for i, s := range Services {
		out[i] = s.Name
	}
	return out
}

// UnixSockets are every service's Unix sockets, in start order.
func UnixSockets() []Socket {
	var out []Socket
	for _, s := range Services {
		for _, so := range s.Sockets {
			if so.File != "" {
				out = append(out, so)
			}
		}
	}
	return out
}
