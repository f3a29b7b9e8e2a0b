package agentd_test

import "testing"

// TestCodex drives the real codex CLI (codex app-server) through agentd
// against the fake model server's Responses API.
func TestCodex(t *testing.T) {
	runtimeSuite(t, "codex")
}
