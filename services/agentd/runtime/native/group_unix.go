//go:build !windows

package native

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// GroupArg, as a program's first argument, makes it the group helper: the
// shell tool runs every command as
//
//	<agentd> __deepcode-group -- ARGV…
//
// The helper leads the command's process group and gets SIGTERM when
// agentd dies (its parent-death signal, which, unlike SIGKILL, it can act
// on): then, as on an interrupt, it stops the whole group, grandchildren
// included, so that a crashed agentd leaves no tool running whose outcome
// nobody records.
const GroupArg = "__deepcode-group"

func groupExec(args []string) int {
	if len(args) < 2 || args[0] != "--" {
		fmt.Fprintln(os.Stderr, "deepcode group helper: no command")
		return 126
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "deepcode: cannot run %s: %v\n", args[1], err)
		return 127
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-sigs:
		pg := syscall.Getpgrp()
		signal.Ignore(syscall.SIGTERM)
		_ = syscall.Kill(-pg, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(shellGrace):
		}
		_ = syscall.Kill(-pg, syscall.SIGKILL) // itself too
		<-done
	}
	if st := cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return st.ExitCode()
	}
	return 1
}

// groupArgv runs argv under the group helper (agentd's own executable).
func groupArgv(argv []string) []string {
	exe, err := os.Executable()
	if err != nil {
		return argv
	}
	return append([]string{exe, GroupArg, "--"}, argv...)
}
