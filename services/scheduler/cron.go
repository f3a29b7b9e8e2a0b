package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // IANA zones on systems without a zoneinfo database (Windows, containers)

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/robfig/cron/v3"
)

// cronParser accepts five fields (minute hour day-of-month month
// day-of-week), six with a leading seconds field, and the fixed descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed cron expression in a time zone. Its occurrences are
// robfig/cron's, with the convention Debian's cron and cronie follow around
// daylight saving time for jobs that run at fixed times of day (the hour
// field is not "*"): a time the clock skips (the spring gap) runs once at the
// transition instead of being lost, and a time the clock repeats (the autumn
// fold) runs once, in its first pass. Jobs with "*" hours keep their real-time
// rhythm: they run in both passes of a repeated hour and have nothing to run
// in a skipped one.
type Schedule struct {
	spec  *cron.SpecSchedule // in loc
	wall  *cron.SpecSchedule // the same fields matched against wall-clock readings (UTC)
	loc   *time.Location
	fixed bool
}

const allHours = 1<<24 - 1

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next is the first occurrence strictly after t; zero if there is none in
// the next five years. The result is in the schedule's zone.
func (s *Schedule) Next(t time.Time) time.Time {
	t = t.In(s.loc)
	n := s.spec.Next(t)
	if !s.fixed {
		return n
	}
	for i := 0; i < 8 && !n.IsZero() && s.secondPass(n); i++ {
		n = s.spec.Next(n)
	}
	if g := s.gapOccurrence(t, n); !g.IsZero() {
		return g
	}
	return n
}

// secondPass reports whether n's wall-clock reading already happened
// earlier under a larger UTC offset (the clock was set back since).
func (s *Schedule) secondPass(n time.Time) bool {
	_, off := n.Zone()
	seen := map[int]bool{}
	for k := 1; k <= 6; k++ {
		_, offB := n.Add(-time.Duration(k) * 30 * time.Minute).Zone()
		if offB <= off || seen[offB] {
			continue
		}
		seen[offB] = true
		m := n.Add(-time.Duration(offB-off) * time.Second)
		if _, o := m.Zone(); o == offB && sameWall(m.In(s.loc), n.In(s.loc)) {
			return true
		}
	}
	return false
}

func sameWall(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	ah, ami, as := a.Clock()
	bh, bmi, bs := b.Clock()
	return ay == by && am == bm && ad == bd && ah == bh && ami == bmi && as == bs
}

// gapOccurrence returns the first clock-forward transition in (after, n]
// whose skipped wall-clock interval contains a time the schedule names: the
// job runs at the transition. Zero if there is none.
func (s *Schedule) gapOccurrence(after, n time.Time) time.Time {
	limit := n
	if limit.IsZero() {
		limit = after.AddDate(5, 0, 0)
	}
	t := after.In(s.loc)
	for i := 0; i < 16; i++ {
		_, end := t.ZoneBounds()
		if end.IsZero() || end.After(limit) {
			return time.Time{}
		}
		_, offBefore := end.Add(-time.Second).Zone()
		_, offAfter := end.Zone()
		if offAfter > offBefore && end.After(after) {
			// The wall clock read from the transition in the old offset
			// up to (not including) the same instant in the new one.
			w := end.Add(time.Duration(offBefore) * time.Second).UTC()
			wallFrom := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, time.UTC)
			wallTo := wallFrom.Add(time.Duration(offAfter-offBefore) * time.Second)
			if x := s.wall.Next(wallFrom.Add(-time.Second)); !x.IsZero() && x.Before(wallTo) {
				return end.In(s.loc)
			}
		}
		t = end.In(s.loc)
	}
	return time.Time{}
}

// ParseSchedule validates expr and zone and compiles them. Errors are
// INVALID_PARAMS with a message that says what is wrong and where.
func ParseSchedule(expr, zone string) (*Schedule, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	if err := checkCron(expr); err != nil {
		return nil, err
	}
	parsed, err := cronParser.Parse(expr)
	if err != nil {
		return nil, errs.New(errs.InvalidParams, "invalid cron expression %q: %v", expr, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, errs.New(errs.InvalidParams, "invalid cron expression %q: only calendar schedules are supported", expr)
	}
	local, wall := *spec, *spec
	local.Location, wall.Location = loc, time.UTC
	s := &Schedule{spec: &local, wall: &wall, loc: loc, fixed: spec.Hour&allHours != allHours}
	if s.Next(time.Now()).IsZero() {
		return nil, errs.New(errs.InvalidParams,
			"the cron expression %q never matches a date in the next five years (a day that does not exist in its month, such as 30 February?)", expr)
	}
	return s, nil
}

type field struct {
	name     string
	min, max int
	names    map[string]int
	hint     string
}

var (
	fSecond = field{name: "second", min: 0, max: 59, hint: "0-59"}
	fMinute = field{name: "minute", min: 0, max: 59, hint: "0-59"}
	fHour   = field{name: "hour", min: 0, max: 23, hint: "0-23"}
	fDom    = field{name: "day of month", min: 1, max: 31, hint: "1-31"}
	fMonth  = field{name: "month", min: 1, max: 12, hint: "1-12 or jan-dec", names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}}
	fDow = field{name: "day of week", min: 0, max: 6, hint: "0-6 or sun-sat; Sunday is 0", names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}}
)

var descriptors = map[string]bool{"@yearly": true, "@annually": true, "@monthly": true, "@weekly": true, "@daily": true, "@midnight": true, "@hourly": true}

// checkCron explains what is wrong with an expression, field by field, in
// the user's own numbering ("field 3: 32 is not a day of month (1-31)").
func checkCron(expr string) error {
	bad := func(format string, args ...any) error {
		return errs.New(errs.InvalidParams, "invalid cron expression %q: %s", expr, fmt.Sprintf(format, args...))
	}
	if expr == "" {
		return errs.New(errs.InvalidParams, "the cron expression is empty: give five fields (minute hour day-of-month month day-of-week), six with seconds first, or a descriptor such as @daily")
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return bad("put the time zone in timeZone (--tz), not in the expression")
	}
	if strings.HasPrefix(expr, "@") {
		switch {
		case descriptors[expr]:
			return nil
		case strings.HasPrefix(expr, "@every"):
			return bad("@every is not supported (its times depend on when it was evaluated); use a calendar expression such as \"*/10 * * * * *\" for every 10 seconds")
		}
		return bad("unknown descriptor; use @yearly, @monthly, @weekly, @daily, @hourly, or cron fields")
	}
	parts := strings.Fields(expr)
	var fields []field
	switch len(parts) {
	case 5:
		fields = []field{fMinute, fHour, fDom, fMonth, fDow}
	case 6:
		fields = []field{fSecond, fMinute, fHour, fDom, fMonth, fDow}
	default:
		return bad("found %d fields; expected 5 (minute hour day-of-month month day-of-week) or 6 with a leading seconds field", len(parts))
	}
	for i, p := range parts {
		if err := fields[i].check(p); err != nil {
			return errs.New(errs.InvalidParams, "invalid cron expression %q: field %d: %s", expr, i+1, err.Error()).With("field", i+1)
		}
	}
	return nil
}

func (f field) check(text string) error {
	for _, item := range strings.Split(text, ",") {
		if item == "" {
			return fmt.Errorf("empty list item in %q (a stray comma?)", text)
		}
		rng, step, hasStep := strings.Cut(item, "/")
		if hasStep {
			if strings.Contains(step, "/") {
				return fmt.Errorf("%q has more than one '/'", item)
			}
			n, err := strconv.Atoi(step)
			if err != nil || n <= 0 {
				return fmt.Errorf("step %q in %q must be a positive whole number", step, item)
			}
			if n > f.max-f.min+1 {
				return fmt.Errorf("step %d in %q is larger than the %s range (%s)", n, item, f.name, f.hint)
			}
		}
		if rng == "*" || rng == "?" {
			continue
		}
		if rng == "" {
			return fmt.Errorf("%q has no value before '/'", item)
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		if isRange && strings.Contains(hi, "-") {
			return fmt.Errorf("%q has more than one '-'", item)
		}
		a, err := f.value(lo)
		if err != nil {
			return err
		}
		if isRange {
			b, err := f.value(hi)
			if err != nil {
				return err
			}
			if b < a {
				return fmt.Errorf("range %s runs backwards (write %s-%s)", rng, hi, lo)
			}
		}
	}
	return nil
}

func (f field) value(s string) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if s == "" {
			return 0, fmt.Errorf("a range is missing a number")
		}
		return 0, fmt.Errorf("%q is not a %s (%s)", s, f.name, f.hint)
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("%d is not a %s (%s)", n, f.name, f.hint)
	}
	return n, nil
}

// LoadZone resolves an IANA time zone name; "" is the machine's zone.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		name = DefaultZone()
	}
	if name == "Local" || strings.ContainsAny(name, " \t") {
		return nil, errs.New(errs.InvalidParams, "unknown time zone %q: use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"", name).With("timeZone", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, errs.New(errs.InvalidParams, "unknown time zone %q: use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"", name).With("timeZone", name)
	}
	return loc, nil
}

// DefaultZone is the machine's IANA zone name ($TZ, then /etc/localtime),
// or "UTC" when it cannot be named. An automation stores the name, so its
// times do not move when the machine's zone changes later.
var DefaultZone = sync.OnceValue(func() string {
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" && tz != "Local" {
		if _, err := time.LoadLocation(tz); err == nil && !filepath.IsAbs(tz) {
			return tz
		}
	}
	if target, err := filepath.EvalSymlinks("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(filepath.ToSlash(target), "zoneinfo/"); ok {
			if _, err := time.LoadLocation(name); err == nil {
				return name
			}
		}
	}
	return "UTC"
})
