package testkit

import (
	"os"
	"sort"
	"strings"
	"testing"
)

// OpenFDs maps this process's open descriptors to what they point at
// (Linux /proc), to check that code under test closes what it opened.
func OpenFDs(tb testing.TB) map[string]string {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, already closed
		}
		out[e.Name()] = target
	}
	return out
}

// NewFDs lists the descriptors of after that before did not have.
func NewFDs(before, after map[string]string) []string {
	var extra []string
	for fd, target := range after {
		if before[fd] != target && !strings.HasPrefix(target, "/proc/") {
			extra = append(extra, fd+" -> "+target)
		}
	}
	sort.Strings(extra)
	return extra
}
