//go:build !linux

package native

// SandboxArg names the sandbox helper (Linux only).
const SandboxArg = "__deepcode-sandbox"

// SandboxMain does nothing where there is no sandbox.
func SandboxMain() {}

// sandboxArgv: the sandbox is Landlock, Linux only.
func sandboxArgv(_, _ string, _ bool, argv []string) ([]string, string) {
	return argv, "none: the workspace-write sandbox needs Linux (Landlock), so the command ran unsandboxed"
}
