package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

func TestCronValidationExplains(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"0 9 32 * *", `field 3: 32 is not a day of month (1-31)`},
		{"60 * * * *", `field 1: 60 is not a minute (0-59)`},
		{"0 24 * * *", `field 2: 24 is not a hour (0-23)`},
		{"0 0 * 13 *", `field 4: 13 is not a month (1-12 or jan-dec)`},
		{"0 0 * * 7", `field 5: 7 is not a day of week (0-6 or sun-sat; Sunday is 0)`},
		{"0 0 * * funday", `field 5: "funday" is not a day of week`},
		{"61 0 0 * * *", `field 1: 61 is not a second (0-59)`},
		{"0 0 0 0 * *", `field 4: 0 is not a day of month (1-31)`},
		{"0 10-5 * * *", `field 2: range 10-5 runs backwards (write 5-10)`},
		{"*/0 * * * *", `field 1: step "0" in "*/0" must be a positive whole number`},
		{"0,,5 * * * *", `field 1: empty list item`},
		{"* * * *", `found 4 fields; expected 5`},
		{"* * * * * * *", `found 7 fields`},
		{"@every 5m", `@every is not supported`},
		{"@fortnightly", `unknown descriptor`},
		{"TZ=UTC 0 0 * * *", `put the time zone in timeZone`},
		{"", `the cron expression is empty`},
		{"0 0 31 2 *", `never matches a date`},
	} {
		_, err := ParseSchedule(c.expr, "UTC")
		if !errs.Is(err, errs.InvalidParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want INVALID_PARAMS containing %q", c.expr, err, c.want)
		}
	}
	for _, ok := range []string{"* * * * *", "*/5 * * * * *", "0 9 * * mon-fri", "0 0 1 jan,jul *", "@daily", "@hourly", "15 10 ? * *", "0 0 29 2 *"} {
		if _, err := ParseSchedule(ok, "Europe/Berlin"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestUnknownZoneIsNamed(t *testing.T) {
	for _, z := range []string{"Mars/Olympus_Mons", "Local", "Europe/Berlin "} {
		_, err := ParseSchedule("* * * * *", z)
		if !errs.Is(err, errs.InvalidParams) || !strings.Contains(err.Error(), `"`+z+`"`) || !strings.Contains(err.Error(), "IANA") {
			t.Errorf("%q: %v", z, err)
		}
	}
	if _, err := LoadZone(""); err != nil {
		t.Fatalf("default zone %q: %v", DefaultZone(), err)
	}
}

// occurrences lists n occurrences after start, formatted in the zone.
func occurrences(t *testing.T, expr, zone, start string, n int) string {
	t.Helper()
	s, err := ParseSchedule(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, start)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		at = s.Next(at)
		out = append(out, at.In(s.Location()).Format("01-02 15:04:05 MST"))
	}
	return strings.Join(out, ", ")
}

func TestDaylightSavingTime(t *testing.T) {
	for _, c := range []struct {
		name, expr, zone, start, want string
		n                             int
	}{
		// Spring gap: 02:00-03:00 does not exist on 30 March 2025 in Berlin.
		// A fixed-time job named inside it runs once, at the transition,
		// instead of being lost for the day (robfig alone skips it).
		{"berlin gap daily", "30 2 * * *", "Europe/Berlin", "2025-03-29T12:00:00+01:00",
			"03-30 03:00:00 CEST, 03-31 02:30:00 CEST, 04-01 02:30:00 CEST", 3},
		{"berlin gap several times in the hour", "0,15,45 2 * * *", "Europe/Berlin", "2025-03-30T00:00:00+01:00",
			"03-30 03:00:00 CEST, 03-31 02:00:00 CEST", 2},
		{"berlin gap seconds field", "0 0 2 * * *", "Europe/Berlin", "2025-03-30T00:00:00+01:00",
			"03-30 03:00:00 CEST, 03-31 02:00:00 CEST", 2},
		{"berlin gap not on a matching weekday", "30 2 * * mon", "Europe/Berlin", "2025-03-29T00:00:00+01:00",
			"03-31 02:30:00 CEST, 04-07 02:30:00 CEST", 2},
		{"berlin gap wildcard hours keep real time", "*/20 * * * *", "Europe/Berlin", "2025-03-30T01:30:00+01:00",
			"03-30 01:40:00 CET, 03-30 03:00:00 CEST, 03-30 03:20:00 CEST", 3},
		// Autumn fold: 02:00-03:00 happens twice on 26 October 2025. A
		// fixed-time job runs in the first pass only (robfig alone runs it
		// twice); a wildcard-hour job runs in both.
		{"berlin fold daily", "30 2 * * *", "Europe/Berlin", "2025-10-25T12:00:00+02:00",
			"10-26 02:30:00 CEST, 10-27 02:30:00 CET, 10-28 02:30:00 CET", 3},
		{"berlin fold hourly", "0 * * * *", "Europe/Berlin", "2025-10-26T00:30:00+02:00",
			"10-26 01:00:00 CEST, 10-26 02:00:00 CEST, 10-26 02:00:00 CET, 10-26 03:00:00 CET", 4},
		{"berlin fold every 2 hours", "0 */2 * * *", "Europe/Berlin", "2025-10-25T23:30:00+02:00",
			"10-26 00:00:00 CEST, 10-26 02:00:00 CEST, 10-26 04:00:00 CET", 3},
		// New York: the gap is 02:00-03:00 on 9 March, the fold 01:00-02:00
		// on 2 November 2025.
		{"new york gap", "30 2 * * *", "America/New_York", "2025-03-08T12:00:00-05:00",
			"03-09 03:00:00 EDT, 03-10 02:30:00 EDT", 2},
		{"new york fold", "30 1 * * *", "America/New_York", "2025-11-01T12:00:00-04:00",
			"11-02 01:30:00 EDT, 11-03 01:30:00 EST", 2},
		{"new york fold every 10 minutes", "*/30 * * * *", "America/New_York", "2025-11-02T00:45:00-04:00",
			"11-02 01:00:00 EDT, 11-02 01:30:00 EDT, 11-02 01:00:00 EST, 11-02 01:30:00 EST, 11-02 02:00:00 EST", 5},
		{"utc has neither", "30 2 * * *", "UTC", "2025-03-30T00:00:00Z",
			"03-30 02:30:00 UTC, 03-31 02:30:00 UTC", 2},
	} {
		if got := occurrences(t, c.expr, c.zone, c.start, c.n); got != c.want {
			t.Errorf("%s: %q in %s from %s:\n got  %s\n want %s", c.name, c.expr, c.zone, c.start, got, c.want)
		}
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The engine evaluates with the wall clock when its timer fires: a forward
// jump makes many occurrences due at once; only those within the tolerance
// (and watched) are on time, the rest go to the missed-run policy.
func TestPlanDueClockJumps(t *testing.T) {
	s, err := ParseSchedule("* * * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	since := mustTime(t, "2025-06-01T10:00:00+02:00")
	first := mustTime(t, "2025-06-01T10:01:00+02:00")

	// On time: the timer fired 30 ms late.
	p := planDue(s, first, since, first.Add(30*time.Millisecond), time.Minute)
	if len(p.onTime) != 1 || !p.onTime[0].Equal(first) || p.missed != 0 || !p.next.Equal(first.Add(time.Minute)) {
		t.Fatalf("on time: %+v", p)
	}

	// The wall clock jumped forward an hour before the timer fired.
	now := mustTime(t, "2025-06-01T11:01:30+02:00")
	p = planDue(s, first, since, now, time.Minute)
	if len(p.onTime) != 1 || !p.onTime[0].Equal(mustTime(t, "2025-06-01T11:01:00+02:00")) {
		t.Fatalf("jump: on time %v", p.onTime)
	}
	if p.missed != 60 || !p.missedFrom.Equal(first) || !p.missedLast.Equal(mustTime(t, "2025-06-01T11:00:00+02:00")) {
		t.Fatalf("jump: missed %d from %s to %s", p.missed, p.missedFrom, p.missedLast)
	}
	if !p.next.Equal(mustTime(t, "2025-06-01T11:02:00+02:00")) {
		t.Fatalf("jump: next %s", p.next)
	}

	// Resumed after a drain at 11:01:10: 11:01 fell due during the drain.
	p = planDue(s, first, mustTime(t, "2025-06-01T11:01:10+02:00"), now, time.Minute)
	if len(p.onTime) != 0 || p.missed != 61 {
		t.Fatalf("after drain: %+v", p)
	}

	// The clock went back: nothing is due, the next occurrence stays.
	back := mustTime(t, "2025-06-01T09:30:00+02:00")
	p = planDue(s, first, since, back, time.Minute)
	if len(p.onTime) != 0 || p.missed != 0 || !p.next.Equal(first) {
		t.Fatalf("back: %+v", p)
	}
}

func TestPlanDueLongOutage(t *testing.T) {
	s, err := ParseSchedule("* * * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	first := mustTime(t, "2025-01-01T00:00:00Z")
	now := mustTime(t, "2025-03-01T00:00:00.5Z")
	t0 := time.Now()
	p := planDue(s, first, now, now, time.Minute)
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("planning a two-month outage took %s", el)
	}
	want := int(now.Sub(first) / time.Second)
	if p.missed < want*9/10 || p.missed > want*11/10 || !p.missedLast.Equal(mustTime(t, "2025-03-01T00:00:00Z")) || len(p.onTime) != 0 {
		t.Fatalf("missed %d (want about %d), last %s, on time %d", p.missed, want, p.missedLast, len(p.onTime))
	}
	if !p.next.Equal(mustTime(t, "2025-03-01T00:00:01Z")) {
		t.Fatalf("next %s", p.next)
	}
}

func TestOccurrenceKeyAndIDs(t *testing.T) {
	at := mustTime(t, "2025-06-01T10:01:00Z")
	if k := occurrenceKey("auto_abcdefghijklmnop", at); k != "auto:auto_abcdefghijklmnop:1748772060000" {
		t.Fatal(k)
	}
	id := newID("auto_")
	if !validID("auto_", id) || validID("run_", id) || validID("auto_", id+"x") {
		t.Fatal(id)
	}
	c := encodeCursor(123, "auto_x")
	if at, id, err := decodeCursor(c); err != nil || at != 123 || id != "auto_x" {
		t.Fatal(at, id, err)
	}
	if _, _, err := decodeCursor("!!"); !errs.Is(err, errs.InvalidParams) {
		t.Fatal(err)
	}
}
