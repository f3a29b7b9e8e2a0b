package service

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestNotReadyIsReflected: SetNotReady and SetStandby turn /health/ready
// into a 503 naming the state, code and reason, NotReadyError returns the
// code for handlers to refuse with, and the report to the manager carries
// it; SetReady undoes all of it.
func TestNotReadyIsReflected(t *testing.T) {
	s := &Service{Name: "t", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ready := func() (int, Health) {
		t.Helper()
		rec := httptest.NewRecorder()
		s.handleReady(rec, httptest.NewRequest(http.MethodGet, "/health/ready", nil))
		var h Health
		if err := json.Unmarshal(rec.Body.Bytes(), &h); err != nil {
			t.Fatalf("ready body %q: %v", rec.Body, err)
		}
		return rec.Code, h
	}
	if code, h := ready(); code != http.StatusOK || h.Status != "ready" || h.Code != "" || s.NotReadyError() != nil {
		t.Fatalf("initially: %d %+v", code, h)
	}
	s.SetStandby(errs.LeaseHeld, "another agentd still holds the runtime lease")
	code, h := ready()
	if code != http.StatusServiceUnavailable || h.Status != StateStandby || h.Code != errs.LeaseHeld || h.Reason == "" {
		t.Fatalf("standby: %d %+v", code, h)
	}
	if err := s.NotReadyError(); !errs.Is(err, errs.LeaseHeld) || !errs.From(err).Retryable {
		t.Fatalf("standby error: %v", err)
	}
	if st := s.reportNow(); st.notReady.State != StateStandby || st.notReady.Code != errs.LeaseHeld {
		t.Fatalf("report: %+v", st)
	}
	s.SetNotReady(errs.Internal, "disk full")
	if code, h := ready(); code != http.StatusServiceUnavailable || h.Status != StateDegraded || h.Reason != "disk full" {
		t.Fatalf("degraded: %d %+v", code, h)
	}
	s.SetReady()
	if code, h := ready(); code != http.StatusOK || h.Status != "ready" || s.NotReadyError() != nil || s.reportNow().notReady != (NotReady{}) {
		t.Fatalf("ready again: %d %+v", code, h)
	}
}
