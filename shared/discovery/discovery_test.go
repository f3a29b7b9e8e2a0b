//go:build !windows

package discovery

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
)

func TestInstanceAndTokenFiles(t *testing.T) {
	l := layout(t)
	if _, err := ReadInstance(l); errs.CodeOf(err) != errs.ServiceNotRunning {
		t.Fatalf("missing instance.json: %v", err)
	}
	if _, err := ReadToken(l); errs.CodeOf(err) != errs.ServiceNotRunning {
		t.Fatalf("missing token: %v", err)
	}
	inst := NewInstance(l, NewInstanceID(), 42, 3081, "supervisor")
	if err := WriteInstance(l, inst); err != nil {
		t.Fatal(err)
	}
	got, err := ReadInstance(l)
	if err != nil || got.InstanceID != inst.InstanceID || got.Address != "127.0.0.1:3081" || got.Sockets["manager"] != l.Socket(paths.ManagerSocket) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	tok := NewToken()
	if err := WriteToken(l, tok); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{l.Token(), l.InstanceJSON()} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v %v", p, fi.Mode().Perm(), err)
		}
	}
	if got, err := ReadToken(l); err != nil || got != tok {
		t.Fatalf("token %q %v", got, err)
	}
	// Removal only by the owner of the record.
	RemoveInstance(l, "inst_other")
	RemoveTokenIf(l, "other")
	if _, err := ReadInstance(l); err != nil {
		t.Fatal("another instance's id removed instance.json")
	}
	if _, err := ReadToken(l); err != nil {
		t.Fatal("another token removed the token")
	}
	RemoveInstance(l, inst.InstanceID)
	RemoveTokenIf(l, tok)
	if _, err := ReadInstance(l); err == nil {
		t.Fatal("instance.json not removed")
	}
	// Damaged files are reported, not trusted.
	if err := os.WriteFile(l.InstanceJSON(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadInstance(l); errs.CodeOf(err) != errs.ServiceNotRunning {
		t.Fatalf("damaged instance.json: %v", err)
	}
	if err := os.WriteFile(l.Token(), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(l); errs.CodeOf(err) != errs.Unauthorized {
		t.Fatalf("damaged token: %v", err)
	}
}

func TestIdsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id, tok := NewInstanceID(), NewToken()
		if seen[id] || seen[tok] || len(tok) != 64 {
			t.Fatal("duplicate or short id/token")
		}
		seen[id], seen[tok] = true, true
	}
}

// TestInstanceLockAcrossProcesses holds instance.lock in a real child
// process: the lock is refused while it lives and free once it is killed
// (a stale lock file never blocks a start).
func TestInstanceLockAcrossProcesses(t *testing.T) {
	l := layout(t)
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) from util-linux is needed to hold the lock in another process")
	}
	// flock holds the lock itself (-o: its command does not inherit it).
	child := exec.Command("flock", "--exclusive", "-o", l.InstanceLock(), "sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL); _ = child.Wait() }
	defer kill()
	deadline := time.Now().Add(10 * time.Second)
	for !InstanceLockHeld(l) {
		if time.Now().After(deadline) {
			t.Fatal("the child never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := TryInstanceLock(context.Background(), l, 100*time.Millisecond); errs.CodeOf(err) != errs.AlreadyRunning {
		t.Fatalf("held lock: %v", err)
	}
	kill()
	lock, err := TryInstanceLock(context.Background(), l, time.Second)
	if err != nil {
		t.Fatalf("stale lock file blocked the start: %v", err)
	}
	if !InstanceLockHeld(l) {
		t.Fatal("InstanceLockHeld does not see our own lock from another descriptor")
	}
	lock.Release()
	if InstanceLockHeld(l) {
		t.Fatal("released lock still reported held")
	}
}

func TestManagementLockSerialises(t *testing.T) {
	l := layout(t)
	first, err := ManagementLock(context.Background(), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = ManagementLock(ctx, l, func() { waited <- struct{}{} })
	if err == nil {
		t.Fatal("second management lock granted while the first is held")
	}
	select {
	case <-waited:
	default:
		t.Fatal("no progress callback while waiting")
	}
	first.Release()
	second, err := ManagementLock(context.Background(), l, nil)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	second.Release()
}
