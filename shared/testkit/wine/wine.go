// Package wine tells tests whether they run under Wine, so that the few
// tests that depend on what Wine does not implement (named-pipe
// first-instance semantics, AF_UNIX, a real PowerShell) skip there, and only
// there: on Windows they always run. .ci/wine runs the Windows tests under
// Wine; windows/README.md lists what Wine cannot validate.
package wine

import "testing"

// Running reports whether this process runs under Wine: ntdll exports
// wine_get_version there, and nowhere on Windows.
func Running() bool { return version() != "" }

// Version is Wine's version, "" outside Wine.
func Version() string { return version() }

// The gaps that tests skip for. Each is Wine's, not deepcode's: on Windows
// the behaviour is there and the test runs.
const (
	// FirstInstanceIgnored: Wine lets a second process create an instance
	// of a named pipe that was created as the first instance
	// (FILE_FLAG_FIRST_PIPE_INSTANCE, NtCreateNamedPipeFile's FILE_CREATE),
	// so a squatter cannot be detected.
	FirstInstanceIgnored = "it ignores FILE_FLAG_FIRST_PIPE_INSTANCE, so a pipe squatter shares the name instead of failing the listener"
	// PseudoConsoleUnwired: Wine 8's CreatePseudoConsole attaches the
	// program and reports its exit, but the program's standard handles are
	// not the console's (null ones stay null, or it inherits the parent's),
	// so no output reaches the console's output pipe and no input reaches
	// the program; ResizePseudoConsole answers "not implemented".
	PseudoConsoleUnwired = "its pseudo console does not connect the program's standard handles (no output or input flows through it) and cannot be resized"
	// NoPowerShell: Wine's powershell.exe is a stub that runs nothing.
	NoPowerShell = "its powershell.exe is a stub that runs no script"
)

// Skip skips t under Wine, saying which of Wine's gaps the test depends on.
// Outside Wine it does nothing.
func Skip(t testing.TB, gap string) {
	t.Helper()
	if v := version(); v != "" {
		t.Skipf("Wine %s: %s (windows/README.md); this test runs on Windows", v, gap)
	}
}
