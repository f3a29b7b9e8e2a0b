package service

import "testing"

func TestUrgentReport(t *testing.T) {
	idle := reportState{}
	busy := reportState{activity: Activity{Turns: 1}}
	for _, c := range []struct {
		name      string
		sent, now reportState
		want      bool
	}{
		{"idle to busy", idle, busy, true},
		{"busy to idle", busy, idle, true},
		{"a handler starts on an idle service", idle, reportState{activity: Activity{Handlers: 1}}, true},
		{"queued work on an idle service", idle, reportState{activity: Activity{Queued: 2}}, true},
		{"draining", busy, reportState{activity: busy.activity, draining: true}, true},
		{"resumed", reportState{draining: true}, idle, true},
		{"a handler starts on a busy service", busy, reportState{activity: Activity{Turns: 1, Handlers: 1}}, false},
		{"another turn", busy, reportState{activity: Activity{Turns: 2}}, false},
		{"a runtime goes warm during a turn", busy, reportState{activity: Activity{Turns: 1, Runtimes: 1}}, false},
		{"the turn ends, a runtime stays warm", reportState{activity: Activity{Turns: 1, Runtimes: 1}}, reportState{activity: Activity{Runtimes: 1}}, false},
		{"the last runtime closes", reportState{activity: Activity{Runtimes: 1}}, idle, true},
		{"not ready", busy, reportState{activity: busy.activity, notReady: NotReady{State: StateStandby, Code: "LEASE_HELD", Reason: "r"}}, true},
		{"ready again", reportState{notReady: NotReady{State: StateDegraded, Code: "X", Reason: "r"}}, idle, true},
		{"another reason", reportState{notReady: NotReady{State: StateDegraded, Code: "X", Reason: "r"}}, reportState{notReady: NotReady{State: StateDegraded, Code: "X", Reason: "s"}}, true},
	} {
		if got := urgentReport(c.sent, c.now); got != c.want {
			t.Errorf("%s: urgentReport = %v, want %v", c.name, got, c.want)
		}
	}
}
