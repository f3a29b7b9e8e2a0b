package scheduler_test

import (
	"github.com/deepcode-dev/deepcode/shared/api"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/scheduler"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

func TestCreateRefusesWhatIsWrong(t *testing.T) {
	env := startInstance(t)
	c := dial(t, env)
	ws := t.TempDir()
	base := func(kv ...any) map[string]any {
		p := map[string]any{"name": "nightly", "cron": "0 3 * * *", "timeZone": "Europe/Berlin", "workspace": ws, "profile": "script", "prompt": "say hi", "trust": true}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(p, kv[i].(string))
			} else {
				p[kv[i].(string)] = kv[i+1]
			}
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		params map[string]any
		code   errs.Code
		msg    string
	}{
		{"invalid cron", base("cron", "0 9 32 * *"), errs.InvalidParams, "field 3: 32 is not a day of month (1-31)"},
		{"cron with too few fields", base("cron", "0 9 *"), errs.InvalidParams, "found 3 fields; expected 5"},
		{"unknown zone", base("timeZone", "Europe/Atlantis"), errs.InvalidParams, `unknown time zone "Europe/Atlantis"`},
		{"untrusted workspace", base("trust", nil), errs.WorkspaceUntrusted, "not trusted"},
		{"missing profile", base("profile", "no-such-profile"), errs.InvalidParams, `unknown profile "no-such-profile"`},
		{"relative workspace", base("workspace", "rel/ative"), errs.InvalidParams, "absolute path"},
		{"missing workspace folder", base("workspace", ws+"/nope"), errs.NotFound, "does not exist"},
		{"empty prompt", base("prompt", "  "), errs.InvalidParams, "prompt must not be empty"},
		{"bad policy", base("missedRunPolicy", "always"), errs.InvalidParams, "missedRunPolicy"},
		{"unknown member", base("color", "red"), errs.InvalidParams, "color"},
	} {
		err := c.call(api.MethodAutomationCreate, tc.params, nil)
		if !errs.Is(err, tc.code) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want %s containing %q", tc.name, err, tc.code, tc.msg)
		}
	}
	var list struct{ Automations []scheduler.Automation }
	c.must(api.MethodAutomationList, map[string]any{}, &list)
	if len(list.Automations) != 0 {
		t.Fatalf("refused creates left automations: %+v", list.Automations)
	}
}

func TestAutomationLifecycle(t *testing.T) {
	env := startInstance(t)
	c := dial(t, env)
	q := db(t, env)
	ws := t.TempDir()
	a := c.create(map[string]any{"name": "nightly", "cron": "0 3 * * *", "timeZone": "Europe/Berlin", "workspace": ws, "profile": "script",
		"prompt": "say nightly", "missedRunPolicy": "runOnce", "trust": true})
	if !strings.HasPrefix(a.ID, "auto_") || !strings.HasPrefix(a.ThreadID, "thr_") || !a.Enabled || a.Revision != 1 ||
		a.MissedRunPolicy != "runOnce" || a.TimeZone != "Europe/Berlin" || a.NextFireAt == nil || string(a.LastResult) != "null" {
		t.Fatalf("created: %s", mustJSON(a))
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if n := a.NextFireAt.In(berlin); n.Hour() != 3 || n.Minute() != 0 || !n.After(time.Now()) {
		t.Fatalf("next fire %s", n)
	}
	b := c.create(map[string]any{"name": "other", "cron": "@daily", "workspace": ws, "profile": "script", "prompt": "say other"})
	if b.TimeZone == "" || b.MissedRunPolicy != "skip" {
		t.Fatalf("defaults: %s", mustJSON(b))
	}

	// read and list (paged)
	var read struct{ Automation scheduler.Automation }
	c.must(api.MethodAutomationRead, map[string]any{"automationId": a.ID}, &read)
	if read.Automation.ID != a.ID || read.Automation.Prompt != "say nightly" {
		t.Fatalf("read: %s", mustJSON(read))
	}
	if err := c.call(api.MethodAutomationRead, map[string]any{"automationId": "auto_aaaaaaaaaaaaaaaa"}, nil); !errs.Is(err, errs.NotFound) {
		t.Fatalf("read missing: %v", err)
	}
	var page struct {
		Automations []scheduler.Automation
		NextCursor  string
	}
	c.must(api.MethodAutomationList, map[string]any{"limit": 1}, &page)
	if len(page.Automations) != 1 || page.Automations[0].ID != a.ID || page.NextCursor == "" {
		t.Fatalf("page 1: %s", mustJSON(page))
	}
	cursor := page.NextCursor
	page.NextCursor = ""
	c.must(api.MethodAutomationList, map[string]any{"limit": 1, "cursor": cursor}, &page)
	if len(page.Automations) != 1 || page.Automations[0].ID != b.ID || page.NextCursor != "" {
		t.Fatalf("page 2: %s", mustJSON(page))
	}

	// update: compare-and-set on revision
	err := c.call(api.MethodAutomationUpdate, map[string]any{"automationId": a.ID, "revision": 7, "name": "x"}, nil)
	if !errs.Is(err, errs.Conflict) || !strings.Contains(err.Error(), "revision 1, not 7") {
		t.Fatalf("stale revision: %v", err)
	}
	err = c.call(api.MethodAutomationUpdate, map[string]any{"automationId": a.ID, "revision": 1, "cron": "0 9 * * 8"}, nil)
	if !errs.Is(err, errs.InvalidParams) || !strings.Contains(err.Error(), "field 5: 8 is not a day of week") {
		t.Fatalf("bad cron in update: %v", err)
	}
	var up struct{ Automation scheduler.Automation }
	c.must(api.MethodAutomationUpdate, map[string]any{"automationId": a.ID, "revision": 1, "cron": "30 6 * * *", "timeZone": "America/New_York", "prompt": "say morning"}, &up)
	ny, _ := time.LoadLocation("America/New_York")
	if up.Automation.Revision != 2 || up.Automation.Cron != "30 6 * * *" || up.Automation.Prompt != "say morning" ||
		up.Automation.NextFireAt.In(ny).Hour() != 6 || up.Automation.NextFireAt.In(ny).Minute() != 30 {
		t.Fatalf("updated: %s", mustJSON(up))
	}
	if err := c.call(api.MethodAutomationUpdate, map[string]any{"automationId": a.ID, "revision": 1, "name": "late"}, nil); !errs.Is(err, errs.Conflict) {
		t.Fatalf("second writer with the old revision: %v", err)
	}

	// pause and resume
	var pr struct{ Automation scheduler.Automation }
	c.must(api.MethodAutomationPause, map[string]any{"automationId": a.ID}, &pr)
	if pr.Automation.Enabled || pr.Automation.NextFireAt != nil || pr.Automation.Revision != 3 {
		t.Fatalf("paused: %s", mustJSON(pr))
	}
	c.must(api.MethodAutomationPause, map[string]any{"automationId": a.ID}, &pr)
	if pr.Automation.Revision != 3 {
		t.Fatalf("pausing twice changed it: %s", mustJSON(pr))
	}
	c.must(api.MethodAutomationResume, map[string]any{"automationId": a.ID}, &pr)
	if !pr.Automation.Enabled || pr.Automation.NextFireAt == nil || pr.Automation.Revision != 4 {
		t.Fatalf("resumed: %s", mustJSON(pr))
	}

	// manual runs, keyed by requestId like the turn methods
	var r1, r2 api.AutomationRunResult
	c.must(api.MethodAutomationRun, map[string]any{"automationId": a.ID, "requestId": "req-1"}, &r1)
	if r1.Duplicate || r1.Run.Status != scheduler.StatusSubmitted || r1.Run.Trigger != scheduler.TriggerManual || r1.Run.TurnID == "" ||
		r1.Run.ThreadID != a.ThreadID || r1.Run.RequestID != "req-1" {
		t.Fatalf("run: %s", mustJSON(r1))
	}
	c.must(api.MethodAutomationRun, map[string]any{"automationId": a.ID, "requestId": "req-1"}, &r2)
	if !r2.Duplicate || r2.Run.ID != r1.Run.ID || r2.Run.TurnID != r1.Run.TurnID {
		t.Fatalf("identical retry: %s (first %s)", mustJSON(r2), mustJSON(r1))
	}
	err = c.call(api.MethodAutomationRun, map[string]any{"automationId": b.ID, "requestId": "req-1"}, nil)
	if !errs.Is(err, errs.DuplicateMessageConflict) {
		t.Fatalf("same requestId, other automation: %v", err)
	}
	if err := c.call(api.MethodAutomationRun, map[string]any{"automationId": a.ID}, nil); !errs.Is(err, errs.InvalidParams) {
		t.Fatalf("no requestId: %v", err)
	}
	var r3 api.AutomationRunResult
	c.must(api.MethodAutomationRun, map[string]any{"automationId": a.ID, "requestId": "req-2"}, &r3)
	if r3.Duplicate || r3.Run.ID == r1.Run.ID || r3.Run.TurnID == r1.Run.TurnID {
		t.Fatalf("new requestId: %s", mustJSON(r3))
	}
	if keys := turnsByKey(t, q); len(keys[r1.Run.MessageID]) != 1 || len(keys[r3.Run.MessageID]) != 1 || len(keys) != 2 {
		t.Fatalf("agentd turns per key: %v", keys)
	}

	// history, newest first, with thread and turn; paged
	var runs struct {
		Runs       []scheduler.Run
		NextCursor string
	}
	c.must(api.MethodAutomationRuns, map[string]any{"automationId": a.ID, "limit": 1}, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != r3.Run.ID || runs.NextCursor == "" || runs.Runs[0].TurnID == "" || runs.Runs[0].ThreadID != a.ThreadID {
		t.Fatalf("runs page 1: %s", mustJSON(runs))
	}
	c.must(api.MethodAutomationRuns, map[string]any{"automationId": a.ID, "cursor": runs.NextCursor}, &runs)
	if len(runs.Runs) != 1 || runs.Runs[0].ID != r1.Run.ID {
		t.Fatalf("runs page 2: %s", mustJSON(runs))
	}
	c.must(api.MethodAutomationRead, map[string]any{"automationId": a.ID}, &read)
	if !strings.Contains(string(read.Automation.LastResult), r3.Run.ID) || !strings.Contains(string(read.Automation.LastResult), `"submitted"`) {
		t.Fatalf("lastResult: %s", read.Automation.LastResult)
	}

	// The same methods through the gateway, as a native client would.
	g := dialGateway(t, env)
	var viaGW struct{ Automations []scheduler.Automation }
	g.must(api.MethodAutomationList, map[string]any{}, &viaGW)
	if len(viaGW.Automations) != 2 {
		t.Fatalf("list via the gateway: %s", mustJSON(viaGW))
	}
	var gr api.AutomationRunResult
	g.must(api.MethodAutomationRun, map[string]any{"automationId": a.ID, "requestId": "req-1"}, &gr)
	if !gr.Duplicate || gr.Run.ID != r1.Run.ID {
		t.Fatalf("retry via the gateway: %s", mustJSON(gr))
	}

	// delete
	c.must(api.MethodAutomationDelete, map[string]any{"automationId": b.ID}, nil)
	if err := c.call(api.MethodAutomationRead, map[string]any{"automationId": b.ID}, nil); !errs.Is(err, errs.NotFound) {
		t.Fatalf("read after delete: %v", err)
	}
	if err := c.call(api.MethodAutomationDelete, map[string]any{"automationId": b.ID}, nil); !errs.Is(err, errs.NotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}
