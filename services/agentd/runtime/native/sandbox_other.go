//go:build !linux

package native

import "os"

// SandboxArg names the sandbox helper (Linux only).
const SandboxArg = "__deepcode-sandbox"

// SandboxMain runs the group helper when the process was started as one
// (see GroupArg); there is no sandbox helper without Linux.
func SandboxMain() {
	if len(os.Args) > 1 && os.Args[1] == GroupArg {
		os.Exit(groupExec(os.Args[2:]))
	}
}

// sandboxArgv: the sandbox is Landlock, Linux only.
func sandboxArgv(_, _ string, _ bool, argv []string) ([]string, string) {
	return argv, "none: the workspace-write sandbox needs Linux (Landlock), so the command ran unsandboxed"
}
