package apitest

import (
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestConformance: a result with an undeclared member, a wrong type or a
// missing member fails; a right one and its nulls pass; notifications and
// error codes are checked too.
func TestConformance(t *testing.T) {
	c, err := Conform()
	if err != nil {
		t.Fatal(err)
	}
	good := `{"terminalId":"term_a","command":["sh"],"cols":80,"rows":24,"exited":true,"exitCode":0,"headOffset":3}`
	if err := c.Result(api.MethodTerminalClose, []byte(good)); err != nil {
		t.Fatalf("valid result refused: %v", err)
	}
	for name, raw := range map[string]string{
		"extra member":   `{"terminalId":"term_a","command":["sh"],"cols":80,"rows":24,"exited":true,"headOffset":3,"pid":7}`,
		"wrong type":     `{"terminalId":"term_a","command":["sh"],"cols":80,"rows":24,"exited":"yes","headOffset":3}`,
		"missing member": `{"command":["sh"],"cols":80,"rows":24,"exited":true,"headOffset":3}`,
	} {
		if err := c.Result(api.MethodTerminalClose, []byte(raw)); err == nil {
			t.Errorf("%s: accepted %s", name, raw)
		}
	}
	if err := c.Result(api.MethodAutomationRead, []byte(`{"automation":null}`)); err != nil {
		t.Errorf("a null pointer member refused: %v", err)
	}
	if err := c.Result("thread/nothing", []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "does not list") {
		t.Errorf("unknown method: %v", err)
	}
	if err := c.Notification(api.NotifyServicePhase, []byte(`{"phase":"draining","extra":1}`)); err == nil {
		t.Error("notification with an undeclared member accepted")
	}
	if err := c.Notification(api.NotifyServicePhase, []byte(`{"phase":"draining"}`)); err != nil {
		t.Error(err)
	}
	if err := c.Error(api.MethodTurnSteer, errs.InputDeliveryPending); err != nil {
		t.Error(err)
	}
	if err := c.Error(api.MethodThreadList, errs.InputDeliveryPending); err == nil {
		t.Error("an error code the contract does not list for the method accepted")
	}
}
