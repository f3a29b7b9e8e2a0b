package discovery

import (
	"testing"

	"github.com/deepcode-dev/deepcode/shared/paths"
)

// layout is a database's layout under temporary folders, with its service
// folder made.
func layout(t *testing.T) *paths.Layout {
	t.Helper()
	rt := t.TempDir()
	l, err := paths.ResolveWith(func(k string) string {
		if k == paths.EnvRuntimeDir {
			return rt
		}
		return ""
	}, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.EnsureServiceDir(); err != nil {
		t.Fatal(err)
	}
	return l
}
