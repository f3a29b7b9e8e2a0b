package cli

import (
	"regexp"
	"testing"
)

// FuzzAgentdLine and FuzzFolderSafe: the functions do what the patterns
// they replaced did.
func FuzzAgentdLine(f *testing.F) {
	re := regexp.MustCompile(`(^| )(service|child)=agentd( |$)`)
	for _, s := range []string{"", "service=agentd", "child=agentd", "time=x level=INFO service=agentd msg=ready", "x service=agentd",
		"service=agentdx", "xservice=agentd", "service=agentd\tx", "child=agentd ", " child=agentd", "service=manager", "service= agentd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, l string) {
		if got, want := agentdLine(l), re.MatchString(l); got != want {
			t.Errorf("agentdLine(%q) = %v, the pattern says %v", l, got, want)
		}
	})
}

func FuzzFolderSafe(f *testing.F) {
	re := regexp.MustCompile(`[^A-Za-z0-9._+-]`)
	for _, s := range []string{"", "1.2.3", "v1.2.3+dirty", "1.2.3-rc.1", "a b/c", "é", "\xff\xfe", "a\x00b", "dev_build"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := folderSafe(v), re.ReplaceAllString(v, "_"); got != want {
			t.Errorf("folderSafe(%q) = %q, the pattern makes %q", v, got, want)
		}
	})
}
