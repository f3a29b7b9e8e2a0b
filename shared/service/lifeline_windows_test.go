package service

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

func handleEnv(f *os.File) string { return strconv.FormatUint(uint64(f.Fd()), 10) }

func testService(supervised bool) (*Service, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{Name: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ctx: ctx, cancel: cancel}
	if supervised {
		// Any pid but 0 marks the service supervised. Not os.Getppid(): a
		// process whose parent is no Windows process (under Wine, started
		// from Linux) has parent pid 0.
		s.SupervisorPID = os.Getpid()
	}
	return s, cancel
}

func TestParseHandle(t *testing.T) {
	if h, err := parseHandle("1234"); err != nil || h != 1234 {
		t.Fatalf("parseHandle(1234) = %v, %v", h, err)
	}
	for _, bad := range []string{"", "0", "-4", "x", "18446744073709551615"} {
		if h, err := parseHandle(bad); err == nil {
			t.Errorf("parseHandle(%q) = %v, want an error", bad, h)
		}
	}
}

// Closing the supervisor's end of the lifeline stops the service.
func TestLifelineEOFStopsTheService(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv(EnvLifelineFD, handleEnv(r))
	s, cancel := testService(true)
	defer cancel()
	s.watchLifeline()
	if os.Getenv(EnvLifelineFD) != "" {
		t.Fatal("the lifeline variable was left in the environment")
	}
	select {
	case <-s.ctx.Done():
		t.Fatal("stopped while the lifeline was open")
	case <-time.After(100 * time.Millisecond):
	}
	_ = w.Close()
	select {
	case <-s.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not stop when its lifeline closed")
	}
}

// An unsupervised process ignores lifeline and stop-request variables.
func TestUnsupervisedIgnoresSupervisorHandles(t *testing.T) {
	t.Setenv(EnvLifelineFD, "1234")
	t.Setenv(EnvStopRequestFD, "1236")
	s, cancel := testService(false)
	defer cancel()
	s.watchLifeline()
	if err := RequestSupervisorStop(1); err == nil {
		t.Fatal("asked a supervisor to stop without a stop-request pipe")
	}
	if os.Getenv(EnvLifelineFD) != "" || os.Getenv(EnvStopRequestFD) != "" {
		t.Fatal("supervisor variables left in the environment")
	}
}

// The manager's stop request is one byte on the supervisor's pipe.
func TestRequestSupervisorStopWritesOnThePipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Setenv(EnvStopRequestFD, handleEnv(w))
	s, cancel := testService(true)
	defer cancel()
	s.takeStopRequest()
	defer func() {
		stopRequest.mu.Lock()
		if stopRequest.f != nil {
			_ = stopRequest.f.Close()
			stopRequest.f = nil
		}
		stopRequest.mu.Unlock()
	}()
	if err := RequestSupervisorStop(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if n, err := r.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
}
