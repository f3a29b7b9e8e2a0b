package native

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// SandboxArg, as a program's first argument, makes it the sandbox helper:
// the shell tool runs its command as
//
//	<agentd> __deepcode-sandbox [--rw DIR]… [--net] -- ARGV…
//
// and the helper restricts itself with Landlock (which a process can only
// do to itself and what it starts) before it executes ARGV. Landlock is
// applied in the child, never in agentd.
const SandboxArg = "__deepcode-sandbox"

// SandboxMain runs the sandbox helper or the group helper and exits when
// the process was started as one (see SandboxArg, GroupArg); otherwise it
// returns at once. agentd's
// main (and the tests' TestMain) call it first.
func SandboxMain() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case SandboxArg:
		os.Exit(sandboxExec(os.Args[2:]))
	case GroupArg:
		os.Exit(groupExec(os.Args[2:]))
	}
}

func sandboxExec(args []string) int {
	var rw []string
	network := false
	i := 0
	for ; i < len(args) && args[i] != "--"; i++ {
		switch args[i] {
		case "--rw":
			if i+1 < len(args) {
				i++
				rw = append(rw, args[i])
			}
		case "--net":
			network = true
		}
	}
	if i+1 >= len(args) {
		fmt.Fprintln(os.Stderr, "deepcode sandbox: no command")
		return 126
	}
	argv := args[i+1:]
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs(rw...).IgnoreIfMissing(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/tty").IgnoreIfMissing(),
	}
	cfg := landlock.V7.BestEffort()
	var err error
	if network {
		err = cfg.RestrictPaths(rules...)
	} else {
		err = cfg.Restrict(rules...)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "deepcode sandbox: cannot restrict the command: %v\n", err)
		return 126
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "deepcode sandbox: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "deepcode sandbox: cannot run %s: %v\n", argv[0], err)
	return 126
}

// sandboxArgv is argv run through the sandbox helper, and a note of what
// the sandbox holds. Where the kernel lacks Landlock the command runs as
// it is, and the note says so.
func sandboxArgv(workspace, tmp string, network bool, argv []string) ([]string, string) {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return argv, fmt.Sprintf("none: this kernel has no Landlock (%v), so the command ran unsandboxed", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return argv, fmt.Sprintf("none: the sandbox helper (agentd's own executable) cannot be found (%v), so the command ran unsandboxed", err)
	}
	out := []string{exe, SandboxArg, "--rw", workspace, "--rw", tmp}
	note := fmt.Sprintf("workspace-write (Landlock ABI v%d): writes only in the workspace and %s", abi, tmp)
	switch {
	case network:
		out = append(out, "--net")
		note += "; network allowed"
	case abi < 4:
		note += "; the network is not restricted (Landlock before ABI v4 has no network rules)"
	default:
		note += "; no TCP connections"
	}
	return append(append(out, "--"), argv...), note
}
