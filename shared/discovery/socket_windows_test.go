package discovery

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/activation"
)

// instance.json names the pipes on Windows: clients dial them as they are.
func TestInstanceSocketsArePipes(t *testing.T) {
	l := layout(t)
	inst := NewInstance(l, NewInstanceID(), 42, 0, "supervisor")
	for _, name := range []string{"manager", "gateway", "agentd", "termhost", "scheduler"} {
		want, err := activation.PipeName(l.DBID, name)
		if err != nil {
			t.Fatal(err)
		}
		if inst.Sockets[name] != want || !activation.IsPipeName(inst.Sockets[name]) {
			t.Errorf("%s at %q, want %q", name, inst.Sockets[name], want)
		}
	}
}
