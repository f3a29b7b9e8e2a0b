package cli

import (
	"os/exec"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

const exeSuffix = ".exe"

func detach(*exec.Cmd) {}

func processAlive(int) bool { return false }

func terminateLaunched(cmd *exec.Cmd) { _ = cmd.Process.Kill(); _ = cmd.Wait() }

func execSupervisor(string, []string, []string) error {
	return errs.New(errs.NotImplemented, "serve --foreground on Windows comes with the Task Scheduler supervisor")
}

func terminateProcess(int) error {
	return errs.New(errs.NotImplemented, "stopping agentd alone is not available on Windows yet: use `deepcode service stop`")
}
