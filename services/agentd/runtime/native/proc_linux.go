package native

import "syscall"

// setParentDeathSignal: the group helper gets SIGTERM when agentd dies, and
// stops the command's whole group (see GroupArg).
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
