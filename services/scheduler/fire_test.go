package scheduler_test

import (
	"context"
	"database/sql"
	"github.com/deepcode-dev/deepcode/shared/api"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/scheduler"
	dcclient "github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// checkExactlyOnce verifies one automation's history of a schedule that
// fires every second: from the first to the last occurrence every second
// is accounted for exactly once (a run row, or inside the missed range of
// one), nothing is left claimed or failed, and every submitted occurrence
// is exactly one agentd turn under its own key. It returns the rows.
func checkExactlyOnce(t *testing.T, q *sql.DB, automationID string) []runRow {
	t.Helper()
	rows := runRows(t, q, automationID)
	keys := turnsByKey(t, q)
	if len(rows) == 0 {
		t.Fatal("no runs")
	}
	covered := map[int64]int{}
	for _, r := range rows {
		if r.trigger != scheduler.TriggerSchedule {
			continue
		}
		switch r.status {
		case scheduler.StatusSubmitted:
			if turns := keys[r.messageID]; len(turns) != 1 || turns[0] != r.turnID {
				t.Errorf("occurrence %s: agentd turns %v, run records %q", r, turns, r.turnID)
			}
		case scheduler.StatusSkipped:
		default:
			t.Errorf("occurrence %s: status %s", r, r.status)
		}
		if r.scheduled.UnixMilli()%1000 != 0 {
			t.Errorf("occurrence %s is not on a whole second", r)
		}
		from := r.scheduled
		if r.missed > 0 {
			from = r.missedFrom
			if n := int(r.scheduled.Sub(from)/time.Second) + 1; n != r.missed {
				t.Errorf("occurrence %s: missed count %d, but it covers %d seconds", r, r.missed, n)
			}
		}
		for s := from.Unix(); s <= r.scheduled.Unix(); s++ {
			covered[s]++
		}
	}
	first, last := rows[0].scheduled.Unix(), rows[len(rows)-1].scheduled.Unix()
	if rows[0].missed > 0 {
		first = rows[0].missedFrom.Unix()
	}
	for s := first; s <= last; s++ {
		if covered[s] != 1 {
			t.Errorf("occurrence %s accounted for %d times", time.Unix(s, 0).UTC().Format("15:04:05"), covered[s])
		}
	}
	if t.Failed() {
		for _, r := range rows {
			t.Log(r)
		}
	}
	return rows
}

func everySecond(c *client, ws, name, policy string) scheduler.Automation {
	return c.create(map[string]any{"name": name, "cron": "* * * * * *", "timeZone": "UTC", "workspace": ws, "profile": "script",
		"prompt": "say tick", "missedRunPolicy": policy, "trust": true})
}

func waitRuns(t *testing.T, q *sql.DB, id string, n int) {
	t.Helper()
	testkit.WaitFor(t, 60*time.Second, "runs of "+id, func() bool { return len(runRows(t, q, id)) >= n })
}

// Two scheduler processes on one database over many occurrences of
// every-second schedules, with the leader SIGKILLed half-way: every
// occurrence is handled exactly once and fires at most one agentd turn.
func TestTwoSchedulersFireEachOccurrenceOnce(t *testing.T) {
	env := startInstance(t)
	q := db(t, env)
	c := dial(t, env)
	ws := t.TempDir()
	var ids []string
	for i, policy := range []string{"skip", "runOnce", "skip"} {
		ids = append(ids, everySecond(c, ws, "tick"+string(rune('a'+i)), policy).ID)
	}
	sb := startStandby(t, env)
	first, tok1 := leader(t, q)
	if first == 0 || first == sb.pid() {
		t.Fatalf("leader pid %d (standby %d)", first, sb.pid())
	}
	// A standby also serves the methods (it writes to the same store).
	s2 := sb.dial(t, env)
	var viaStandby struct{ Automations []scheduler.Automation }
	s2.must(api.MethodAutomationList, map[string]any{}, &viaStandby)
	if len(viaStandby.Automations) != 3 {
		t.Fatalf("standby list: %s", mustJSON(viaStandby))
	}
	// An automation created through the standby is fired by the leader,
	// which notices the change within its poll interval.
	ids = append(ids, everySecond(s2, ws, "via standby", "skip").ID)
	waitRuns(t, q, ids[3], 3)
	if pid, _ := leader(t, q); pid != first {
		t.Fatalf("leadership moved before the kill: %d, was %d", pid, first)
	}
	waitRuns(t, q, ids[0], 6)

	kill(t, first)
	killed := time.Now()
	var second int
	var tok2 int64
	testkit.WaitFor(t, 60*time.Second, "another leader", func() bool {
		second, tok2 = leader(t, q)
		return second != 0 && second != first
	})
	t.Logf("leadership moved from pid %d (token %d) to pid %d (token %d) %s after SIGKILL (the standby is pid %d)",
		first, tok1, second, tok2, time.Since(killed).Round(time.Millisecond), sb.pid())
	n := len(runRows(t, q, ids[0]))
	waitRuns(t, q, ids[0], n+6)

	// A change made through the standby reaches whichever process leads.
	for _, id := range ids {
		s2.must(api.MethodAutomationPause, map[string]any{"automationId": id}, nil)
	}
	waitSettled(t, q)
	time.Sleep(3 * time.Second) // the leader's change poll, then nothing more may fire
	before := len(turnsByKey(t, q))
	time.Sleep(2 * time.Second)
	if after := len(turnsByKey(t, q)); after != before {
		t.Fatalf("paused automations still fire: %d turns, then %d", before, after)
	}
	tokens := map[int64]bool{}
	for _, id := range ids {
		for _, r := range checkExactlyOnce(t, q, id) {
			tokens[r.token] = true
		}
	}
	if len(tokens) < 2 {
		t.Errorf("every occurrence was claimed under one lease token %v: leadership never moved", tokens)
	}
}

// SIGKILL of the leader after it committed a claim and before it submitted
// it (the test hook holds it there): the occurrence is submitted exactly
// once, by the standby that takes over or by the restarted leader.
func TestKillBetweenClaimAndSubmission(t *testing.T) {
	for _, withStandby := range []bool{true, false} {
		name := "restarted-leader"
		if withStandby {
			name = "standby"
		}
		t.Run(name, func(t *testing.T) {
			env := startInstance(t, scheduler.EnvTestPauseAfterClaim+"=1h")
			q := db(t, env)
			c := dial(t, env)
			var sb *standby
			if withStandby {
				sb = startStandby(t, env, scheduler.EnvTestPauseAfterClaim+"=")
			}
			a := everySecond(c, t.TempDir(), "held", "skip")
			var claimed runRow
			testkit.WaitFor(t, 30*time.Second, "a claim", func() bool {
				rows := runRows(t, q, a.ID)
				if len(rows) > 0 {
					claimed = rows[0]
				}
				return len(rows) > 0
			})
			if claimed.status != scheduler.StatusClaimed {
				t.Fatalf("first run %s, want claimed (held by the hook)", claimed)
			}
			time.Sleep(500 * time.Millisecond)
			if keys := turnsByKey(t, q); len(keys) != 0 {
				t.Fatalf("submitted while held: %v", keys)
			}
			pid, _ := leader(t, q)
			if pid == 0 || sb != nil && pid == sb.pid() {
				t.Fatalf("leader %d", pid)
			}
			kill(t, pid)
			killed := time.Now()
			testkit.WaitFor(t, 90*time.Second, "the claimed occurrence to be submitted", func() bool {
				for _, r := range runRows(t, q, a.ID) {
					if r.id == claimed.id {
						return r.status == scheduler.StatusSubmitted
					}
				}
				return false
			})
			newLeader, _ := leader(t, q)
			t.Logf("submitted %s after SIGKILL by pid %d", time.Since(killed).Round(time.Millisecond), newLeader)
			if withStandby && newLeader != sb.pid() {
				t.Logf("the restarted leader won the lease race (standby pid %d)", sb.pid())
			}
			if keys := turnsByKey(t, q)[claimed.messageID]; len(keys) != 1 {
				t.Fatalf("occurrence %s has %d turns: %v", claimed, len(keys), keys)
			}
			dial(t, env).must(api.MethodAutomationPause, map[string]any{"automationId": a.ID}, nil)
		})
	}
}

// Missed-run policies after downtime: the instance stops for several
// occurrences; on start the skip automation fires none of them (one skipped
// row accounts for them) and the runOnce automation fires exactly one, the
// latest.
func TestMissedRunPoliciesAfterDowntime(t *testing.T) {
	env := startInstance(t)
	q := db(t, env)
	c := dial(t, env)
	ws := t.TempDir()
	skip := everySecond(c, ws, "skip", "skip")
	once := everySecond(c, ws, "once", "runOnce")
	waitRuns(t, q, skip.ID, 3)
	env.MustRun("service", "stop")
	time.Sleep(4 * time.Second)
	env.MustRun("service", "start", "--port", "0")
	c = dial(t, env)
	n := len(runRows(t, q, skip.ID))
	waitRuns(t, q, skip.ID, n+3)
	c.pauseAll(skip.ID, once.ID)
	waitSettled(t, q)
	checkGap(t, checkExactlyOnce(t, q, skip.ID), scheduler.StatusSkipped, 3)
	checkGap(t, checkExactlyOnce(t, q, once.ID), scheduler.StatusSubmitted, 3)
}

// checkGap finds the one row that stands for missed occurrences and checks
// its status and that it covers at least min of them.
func checkGap(t *testing.T, rows []runRow, status string, min int) {
	t.Helper()
	var gaps []runRow
	for _, r := range rows {
		if r.missed > 0 {
			gaps = append(gaps, r)
		}
	}
	if len(gaps) != 1 || gaps[0].status != status || gaps[0].missed < min {
		t.Fatalf("missed rows %v, want one %s row covering at least %d occurrences", gaps, status, min)
	}
}

// A drain pauses triggers; occurrences due during it go to the missed-run
// policy after resume; automation/run is refused while draining.
func TestDrainPausesTriggers(t *testing.T) {
	env := startInstance(t)
	q := db(t, env)
	c := dial(t, env)
	ws := t.TempDir()
	skip := everySecond(c, ws, "skip", "skip")
	once := everySecond(c, ws, "once", "runOnce")
	waitRuns(t, q, skip.ID, 3)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := dcclient.Connect(ctx, env.Layout(""), dcclient.Options{Transport: dcclient.Unix})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	timeout := 60.0
	var ph mgmt.PhaseResult
	if err := m.Call(ctx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: &timeout}, &ph); err != nil || ph.Phase != mgmt.PhaseDraining {
		t.Fatalf("drain: %+v %v", ph, err)
	}
	drained := len(runRows(t, q, skip.ID)) + len(runRows(t, q, once.ID))
	err = c.call(api.MethodAutomationRun, map[string]any{"automationId": skip.ID, "requestId": "during-drain"}, nil)
	if !errs.Is(err, errs.ServiceDraining) {
		t.Fatalf("automation/run while draining: %v", err)
	}
	var list struct{ Automations []scheduler.Automation }
	c.must(api.MethodAutomationList, map[string]any{}, &list)
	time.Sleep(4 * time.Second)
	if now := len(runRows(t, q, skip.ID)) + len(runRows(t, q, once.ID)); now != drained {
		t.Fatalf("occurrences fired while draining: %d runs, then %d", drained, now)
	}
	if err := m.Call(ctx, mgmt.MethodResume, map[string]any{}, &ph); err != nil || ph.Phase != mgmt.PhaseRunning {
		t.Fatalf("resume: %+v %v", ph, err)
	}
	n := len(runRows(t, q, skip.ID))
	waitRuns(t, q, skip.ID, n+3)
	c.pauseAll(skip.ID, once.ID)
	waitSettled(t, q)
	checkGap(t, checkExactlyOnce(t, q, skip.ID), scheduler.StatusSkipped, 3)
	checkGap(t, checkExactlyOnce(t, q, once.ID), scheduler.StatusSubmitted, 3)
	var rr api.AutomationRunResult
	c.must(api.MethodAutomationRun, map[string]any{"automationId": skip.ID, "requestId": "after-drain"}, &rr)
	if rr.Run.Status != scheduler.StatusSubmitted {
		t.Fatalf("run after resume: %s", mustJSON(rr))
	}
}
