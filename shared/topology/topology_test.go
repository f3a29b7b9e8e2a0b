package topology

import (
	"os"
	"path/filepath"
	"testing"
)

// TestTable: names, listener names, files and units are unique, every
// service has a main under cmd/, and exactly one socket is TCP (the
// gateway's port).
func TestTable(t *testing.T) {
	seen := map[string]string{}
	tcp := 0
	for _, s := range Services {
		if s.Name == "" || len(s.Sockets) == 0 {
			t.Fatalf("incomplete service %+v", s)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "cmd", s.Binary(), "main.go")); err != nil {
			t.Errorf("%s: no main: %v", s.Name, err)
		}
		for _, key := range []string{"service:" + s.Name} {
			if prev, dup := seen[key]; dup {
				t.Errorf("%s listed twice (%s)", key, prev)
			}
			seen[key] = s.Name
		}
		for _, so := range s.Sockets {
			for _, key := range []string{"listener:" + so.Name, "unit:" + so.Unit, "file:" + so.File} {
				if key == "file:" {
					tcp++
					continue
				}
				if prev, dup := seen[key]; dup {
					t.Errorf("%s used by %s and %s", key, prev, s.Name)
				}
				seen[key] = s.Name
			}
		}
	}
	if tcp != 1 {
		t.Errorf("%d TCP listeners, want 1 (the gateway's port)", tcp)
	}
	if got := len(UnixSockets()); got != len(Services) {
		t.Errorf("%d Unix sockets for %d services", got, len(Services))
	}
	if n := Names(); len(n) != len(Services) || n[0] != "manager" {
		t.Errorf("Names() = %v", n)
	}
}
