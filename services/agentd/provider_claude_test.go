package agentd_test

import "testing"

// TestClaude drives the real Claude Code CLI (stream-json mode) through
// agentd against the fake model server's Anthropic Messages API.
func TestClaude(t *testing.T) {
	runtimeSuite(t, "claude")
}
