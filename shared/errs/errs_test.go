package errs

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestTableIsComplete(t *testing.T) {
	for _, c := range Codes() {
		if c == "" || strings.ToUpper(string(c)) != string(c) {
			t.Errorf("code %q is not UPPER_SNAKE", c)
		}
		rc := c.RPCCode()
		if rc != -32000 && (rc > -32600 || rc < -32700) {
			t.Errorf("%s maps to JSON-RPC %d", c, rc)
		}
		if s := c.HTTPStatus(); s < 400 || s > 599 {
			t.Errorf("%s maps to HTTP %d", c, s)
		}
	}
	for c, want := range map[Code]bool{ServiceDraining: true, InputDeliveryPending: true, InputDeliveryUncertain: false,
		DuplicateMessageConflict: false, ProviderUnavailable: true, DaemonTimeout: true, WorkerCrashed: false, ConnectionLost: false} {
		if c.Retryable() != want {
			t.Errorf("%s retryable = %v", c, c.Retryable())
		}
	}
	if ParseError.RPCCode() != -32700 || MethodNotFound.RPCCode() != -32601 || InvalidParams.RPCCode() != -32602 {
		t.Fatal("protocol codes wrong")
	}
}

func TestWrapKeepsCauseButHidesIt(t *testing.T) {
	cause := errors.New("disk on fire")
	e := Wrap(cause, StartFailed, "cannot start %s", "x")
	if !errors.Is(e, cause) || e.ToWire().Message != "cannot start x" || CodeOf(fmt.Errorf("ctx: %w", e)) != StartFailed {
		t.Fatalf("wrap: %+v", e)
	}
	if From(cause).Code != Internal || From(cause).Message != "internal error" {
		t.Fatal("unclassified errors must become INTERNAL without their text")
	}
	if !Is(fmt.Errorf("x: %w", New(NotFound, "n")), NotFound) || Is(cause, NotFound) || CodeOf(nil) != "" {
		t.Fatal("Is/CodeOf")
	}
	if e := New(Conflict, "c").With("revision", 3); e.Data["revision"] != 3 {
		t.Fatal("With")
	}
}
