package cli

import (
	"os"
	"os/exec"
	"testing"

	"github.com/deepcode-dev/deepcode/services/supervisor"
)

func TestProcessAlive(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command(os.Getenv("ComSpec"), "/c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Skipf("no command interpreter: %v", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Wait()
	if processAlive(pid) {
		t.Fatalf("exited process %d is alive", pid)
	}
	if processAlive(0) || processAlive(-1) {
		t.Fatal("pid 0 or -1 is alive")
	}
}

// An instance the logon task started reports the Windows service manager's
// name as its activation: the CLI stops and uninstalls it through the task.
func TestTaskActivationIsTheManagerName(t *testing.T) {
	if got := (&taskManager{}).Name(); got != supervisor.TaskSchedulerActivation {
		t.Fatalf("task manager %q, supervisor reports %q", got, supervisor.TaskSchedulerActivation)
	}
}

func TestDetachLeavesTheConsole(t *testing.T) {
	cmd := exec.Command("x")
	detach(cmd)
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.CreationFlags == 0 {
		t.Fatal("detach set no creation flags")
	}
}
