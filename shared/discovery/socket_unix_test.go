//go:build !windows

package discovery

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/paths"
)

// instance.json names the socket files themselves outside Windows.
func TestInstanceSocketsAreSocketPaths(t *testing.T) {
	l := layout(t)
	inst := NewInstance(l, NewInstanceID(), 42, 0, "supervisor")
	want := map[string]string{
		"manager": paths.ManagerSocket, "gateway": paths.GatewaySocket, "agentd": paths.AgentdSocket,
		"termhost": paths.TermhostSocket, "scheduler": paths.SchedulerSocket,
	}
	if len(inst.Sockets) != len(want) {
		t.Fatalf("sockets %v", inst.Sockets)
	}
	for name, file := range want {
		if inst.Sockets[name] != l.Socket(file) {
			t.Errorf("%s at %q, want %q", name, inst.Sockets[name], l.Socket(file))
		}
	}
}
