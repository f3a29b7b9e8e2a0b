//go:build !windows && !linux

package supervisor_test

import "testing"

// becomeSubreaper needs Linux's PR_SET_CHILD_SUBREAPER.
func becomeSubreaper(t *testing.T) {
	t.Skip("needs a child subreaper (Linux)")
}

func children() map[int]string { return nil }
