package scheduler

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Limits.
const (
	maxName      = 200
	maxPrompt    = 256 << 10
	maxRequestID = 128
	defaultPage  = 50
	maxPage      = 200
)

func (s *Scheduler) methods(mux *rpc.Mux) {
	mux.Handle(api.MethodAutomationCreate, rpc.Method(s.create))
	mux.Handle(api.MethodAutomationList, rpc.Method(s.list))
	mux.Handle(api.MethodAutomationRead, rpc.Method(func(ctx context.Context, p automationRef) (api.AutomationResult, error) {
		a, err := getAutomation(ctx, s.db.SQL(), p.AutomationID)
		if err != nil {
			return api.AutomationResult{}, err
		}
		return api.AutomationResult{Automation: a}, nil
	}))
	mux.Handle(api.MethodAutomationUpdate, rpc.Method(s.update))
	mux.Handle(api.MethodAutomationDelete, rpc.Method(s.delete))
	mux.Handle(api.MethodAutomationPause, rpc.Method(func(ctx context.Context, p automationRef) (api.AutomationResult, error) {
		return s.setEnabled(ctx, p.AutomationID, false)
	}))
	mux.Handle(api.MethodAutomationResume, rpc.Method(func(ctx context.Context, p automationRef) (api.AutomationResult, error) {
		return s.setEnabled(ctx, p.AutomationID, true)
	}))
	mux.Handle(api.MethodAutomationRun, rpc.Method(s.runNow))
	mux.Handle(api.MethodAutomationRuns, rpc.Method(s.runs))
}

func checkName(name string) error {
	if strings.TrimSpace(name) == "" || len(name) > maxName || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errs.New(errs.InvalidParams, "name must be 1 to %d printable characters", maxName)
	}
	return nil
}

func checkPrompt(prompt string) error {
	if strings.TrimSpace(prompt) == "" {
		return errs.New(errs.InvalidParams, "prompt must not be empty")
	}
	if len(prompt) > maxPrompt || !utf8.ValidString(prompt) {
		return errs.New(errs.InvalidParams, "prompt must be valid UTF-8 of at most %d bytes", maxPrompt)
	}
	return nil
}

func checkPolicy(p string) (string, error) {
	switch p {
	case "":
		return PolicySkip, nil
	case PolicySkip, PolicyRunOnce:
		return p, nil
	}
	return "", errs.New(errs.InvalidParams, "missedRunPolicy must be %q or %q, not %q", PolicySkip, PolicyRunOnce, p)
}

func checkWorkspace(ws string) error {
	if ws == "" {
		return errs.New(errs.InvalidParams, "workspace is required")
	}
	if !filepath.IsAbs(ws) {
		return errs.New(errs.InvalidParams, "workspace must be an absolute path, not %q", ws)
	}
	return nil
}

// checkProfile refuses a profile the configuration does not define.
func (s *Scheduler) checkProfile(name string) error {
	if _, ok := s.svc.Config.Profile(name); ok {
		return nil
	}
	var names []string
	for n := range s.svc.Config.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return errs.New(errs.InvalidParams, "unknown profile %q; configured profiles: %s", name, strings.Join(names, ", ")).With("profile", name)
}

func threadTitle(name string) string {
	t := "automation: " + name
	for len(t) > 256 {
		_, size := utf8.DecodeLastRuneInString(t)
		t = t[:len(t)-size]
	}
	return t
}

func (s *Scheduler) create(ctx context.Context, p CreateParams) (api.AutomationResult, error) {
	if err := checkName(p.Name); err != nil {
		return api.AutomationResult{}, err
	}
	zone := p.TimeZone
	if zone == "" {
		zone = DefaultZone()
	}
	sched, err := ParseSchedule(p.Cron, zone)
	if err != nil {
		return api.AutomationResult{}, err
	}
	if err := checkWorkspace(p.Workspace); err != nil {
		return api.AutomationResult{}, err
	}
	if p.Profile == "" {
		p.Profile = s.svc.Config.DefaultProfile()
	}
	if err := s.checkProfile(p.Profile); err != nil {
		return api.AutomationResult{}, err
	}
	if err := checkPrompt(p.Prompt); err != nil {
		return api.AutomationResult{}, err
	}
	policy, err := checkPolicy(p.MissedRunPolicy)
	if err != nil {
		return api.AutomationResult{}, err
	}
	// One agentd thread per automation; agentd checks (and with trust,
	// records) the workspace's trust.
	th, err := s.agentd.startThread(ctx, p.Workspace, p.Profile, threadTitle(p.Name), p.Trust)
	if err != nil {
		return api.AutomationResult{}, err
	}
	now := s.now()
	id := newID("auto_")
	var next any
	if n := sched.Next(now); !n.IsZero() {
		next = ms(n)
	}
	var a *Automation
	var gen int64
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO automations (id, name, cron, time_zone, workspace, profile, prompt, enabled,
			missed_run_policy, thread_id, next_fire_at, created_at, updated_at, revision) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, 1)`,
			id, p.Name, strings.TrimSpace(p.Cron), zone, th.Workspace, p.Profile, p.Prompt, policy, th.ID, next, ms(now), ms(now)); err != nil {
			return err
		}
		var err error
		if gen, err = bumpGeneration(ctx, tx); err != nil {
			return err
		}
		a, err = getAutomation(ctx, tx, id)
		return err
	})
	if err != nil {
		return api.AutomationResult{}, err
	}
	s.eng.ownChange(gen)
	s.eng.apply(a, sched)
	s.log.Info("automation created", "automation", a.ID, "cron", a.Cron, "timeZone", a.TimeZone, "thread", a.ThreadID)
	return api.AutomationResult{Automation: a}, nil
}

func (s *Scheduler) list(ctx context.Context, p pageParams) (api.AutomationListResult, error) {
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return api.AutomationListResult{}, err
	}
	q := `SELECT ` + automationColumns + ` FROM automations`
	var args []any
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return api.AutomationListResult{}, err
		}
		q += ` WHERE (created_at, id) > (?, ?)`
		args = append(args, at, id)
	}
	q += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, limit+1)
	out, err := queryAll(ctx, s.db.SQL(), scanAutomation, q, args...)
	if err != nil {
		return api.AutomationListResult{}, err
	}
	res := api.AutomationListResult{}
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		res.NextCursor = encodeCursor(ms(last.CreatedAt), last.ID)
	}
	res.Automations = out
	return res, nil
}

func pageLimit(v int) (int, error) {
	switch {
	case v == 0:
		return defaultPage, nil
	case v < 0 || v > maxPage:
		return 0, errs.New(errs.InvalidParams, "limit must be between 1 and %d", maxPage)
	}
	return v, nil
}

func conflict(a *Automation, want int64) error {
	return errs.New(errs.Conflict, "automation %s is at revision %d, not %d: read it again and retry the update", a.ID, a.Revision, want).
		With("revision", a.Revision)
}

func (s *Scheduler) update(ctx context.Context, p UpdateParams) (api.AutomationResult, error) {
	cur, err := getAutomation(ctx, s.db.SQL(), p.AutomationID)
	if err != nil {
		return api.AutomationResult{}, err
	}
	if p.Revision < 1 {
		return api.AutomationResult{}, errs.New(errs.InvalidParams, "revision must be the automation's current revision (1 or more), as read")
	}
	if cur.Revision != p.Revision {
		return api.AutomationResult{}, conflict(cur, p.Revision)
	}
	next := *cur
	if p.Name != nil {
		if err := checkName(*p.Name); err != nil {
			return api.AutomationResult{}, err
		}
		next.Name = *p.Name
	}
	if p.Cron != nil {
		next.Cron = strings.TrimSpace(*p.Cron)
	}
	if p.TimeZone != nil {
		next.TimeZone = *p.TimeZone
		if next.TimeZone == "" {
			next.TimeZone = DefaultZone()
		}
	}
	sched, err := ParseSchedule(next.Cron, next.TimeZone)
	if err != nil {
		return api.AutomationResult{}, err
	}
	if p.Profile != nil {
		if err := s.checkProfile(*p.Profile); err != nil {
			return api.AutomationResult{}, err
		}
		next.Profile = *p.Profile
	}
	if p.Prompt != nil {
		if err := checkPrompt(*p.Prompt); err != nil {
			return api.AutomationResult{}, err
		}
		next.Prompt = *p.Prompt
	}
	if p.MissedRunPolicy != nil {
		if next.MissedRunPolicy, err = checkPolicy(*p.MissedRunPolicy); err != nil {
			return api.AutomationResult{}, err
		}
	}
	if p.Workspace != nil && *p.Workspace != cur.Workspace {
		if err := checkWorkspace(*p.Workspace); err != nil {
			return api.AutomationResult{}, err
		}
		// A thread belongs to one workspace: the automation moves to a new one.
		th, err := s.agentd.startThread(ctx, *p.Workspace, next.Profile, threadTitle(next.Name), p.Trust)
		if err != nil {
			return api.AutomationResult{}, err
		}
		next.Workspace, next.ThreadID = th.Workspace, th.ID
	}
	reschedule := next.Cron != cur.Cron || next.TimeZone != cur.TimeZone
	now := s.now()
	var a *Automation
	var gen int64
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		c, err := getAutomation(ctx, tx, p.AutomationID)
		if err != nil {
			return err
		}
		if c.Revision != p.Revision {
			return conflict(c, p.Revision)
		}
		nextFire := any(nil)
		if c.NextFireAt != nil {
			nextFire = ms(*c.NextFireAt)
		}
		if reschedule && c.Enabled {
			nextFire = nil
			if n := sched.Next(now); !n.IsZero() {
				nextFire = ms(n)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE automations SET name = ?, cron = ?, time_zone = ?, workspace = ?, profile = ?, prompt = ?,
			missed_run_policy = ?, thread_id = ?, next_fire_at = ?, updated_at = ?, revision = revision + 1 WHERE id = ?`,
			next.Name, next.Cron, next.TimeZone, next.Workspace, next.Profile, next.Prompt, next.MissedRunPolicy, next.ThreadID,
			nextFire, ms(now), c.ID); err != nil {
			return err
		}
		if gen, err = bumpGeneration(ctx, tx); err != nil {
			return err
		}
		a, err = getAutomation(ctx, tx, c.ID)
		return err
	})
	if err != nil {
		return api.AutomationResult{}, err
	}
	s.eng.ownChange(gen)
	s.eng.apply(a, sched)
	return api.AutomationResult{Automation: a}, nil
}

func (s *Scheduler) delete(ctx context.Context, p automationRef) (api.AutomationDeleteResult, error) {
	if !validID("auto_", p.AutomationID) {
		return api.AutomationDeleteResult{}, notFound(p.AutomationID)
	}
	var gen int64
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM automations WHERE id = ?`, p.AutomationID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound(p.AutomationID)
		}
		gen, err = bumpGeneration(ctx, tx)
		return err
	})
	if err != nil {
		return api.AutomationDeleteResult{}, err
	}
	s.eng.ownChange(gen)
	s.eng.apply(&Automation{ID: p.AutomationID}, nil)
	return api.AutomationDeleteResult{AutomationID: p.AutomationID, Deleted: true}, nil
}

// setEnabled pauses or resumes; a resumed automation's schedule starts
// from now (nothing "missed" while it was paused runs).
func (s *Scheduler) setEnabled(ctx context.Context, id string, enabled bool) (api.AutomationResult, error) {
	cur, err := getAutomation(ctx, s.db.SQL(), id)
	if err != nil {
		return api.AutomationResult{}, err
	}
	sched, err := ParseSchedule(cur.Cron, cur.TimeZone)
	if err != nil {
		return api.AutomationResult{}, err
	}
	now := s.now()
	var a *Automation
	var gen int64
	changed := false
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		c, err := getAutomation(ctx, tx, id)
		if err != nil {
			return err
		}
		if c.Enabled == enabled {
			a = c
			return nil
		}
		changed = true
		var next any
		flag := 0
		if enabled {
			flag = 1
			if n := sched.Next(now); !n.IsZero() {
				next = ms(n)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE automations SET enabled = ?, next_fire_at = ?, updated_at = ?, revision = revision + 1 WHERE id = ?`,
			flag, next, ms(now), id); err != nil {
			return err
		}
		if gen, err = bumpGeneration(ctx, tx); err != nil {
			return err
		}
		a, err = getAutomation(ctx, tx, id)
		return err
	})
	if err != nil {
		return api.AutomationResult{}, err
	}
	if changed {
		s.eng.ownChange(gen)
		s.eng.apply(a, sched)
	}
	return api.AutomationResult{Automation: a}, nil
}

func checkRequestID(id string) error {
	if id == "" || len(id) > maxRequestID || !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errs.New(errs.InvalidParams, "requestId must be 1 to %d printable characters, chosen by the client and kept for retries", maxRequestID)
	}
	return nil
}

// runFingerprint is the versioned SHA-256 of what automation/run asked for.
func runFingerprint(p RunParams) string {
	b, _ := json.Marshal(struct {
		V            int    `json:"v"`
		AutomationID string `json:"automationId"`
	}{1, p.AutomationID})
	sum := sha256.Sum256(b)
	return "v1:" + hex.EncodeToString(sum[:])
}

// runNow is automation/run, keyed by requestId exactly like the turn
// methods: the lookup, the conflict check and the insert are one
// transaction; an identical retry answers the same run (duplicate: true),
// submitting it first if it is still only claimed; the same requestId for
// another automation is DUPLICATE_MESSAGE_CONFLICT.
func (s *Scheduler) runNow(ctx context.Context, p RunParams) (api.AutomationRunResult, error) {
	if err := checkRequestID(p.RequestID); err != nil {
		return api.AutomationRunResult{}, err
	}
	if !validID("auto_", p.AutomationID) {
		return api.AutomationRunResult{}, notFound(p.AutomationID)
	}
	fp := runFingerprint(p)
	now := s.now()
	var r *Run
	dup := false
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		ex, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+runColumns+` FROM automation_runs WHERE request_id = ?`, p.RequestID))
		switch {
		case err == nil:
			if ex.AutomationID != p.AutomationID || ex.fingerprint != fp {
				return errs.New(errs.DuplicateMessageConflict,
					"requestId %q was already used for a different request (automation %s); use a new requestId for a new request", p.RequestID, ex.AutomationID).
					With("runId", ex.ID)
			}
			r, dup = ex, true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		a, err := getAutomation(ctx, tx, p.AutomationID)
		if err != nil {
			return err
		}
		id := newID("run_")
		r = &Run{AutomationRun: api.AutomationRun{ID: id, AutomationID: a.ID, ScheduledAt: now.UTC(), Trigger: TriggerManual, RequestID: p.RequestID, Status: StatusClaimed,
			ThreadID: a.ThreadID, MessageID: "auto:" + a.ID + ":" + id, CreatedAt: now.UTC(), UpdatedAt: now.UTC()},
			profile: a.Profile, prompt: a.Prompt, fingerprint: fp}
		if _, err := insertRun(ctx, tx, r, 0, now); err != nil {
			return err
		}
		r.fresh = true
		_, err = tx.ExecContext(ctx, `UPDATE automations SET last_result = ? WHERE id = ?`, summary(r, now), a.ID)
		return err
	})
	if err != nil {
		return api.AutomationRunResult{}, err
	}
	if r.Status == StatusClaimed && s.sub.claim(r) {
		s.sub.busy(1)
		retry := s.submitOnce(context.WithoutCancel(ctx), r)
		s.sub.busy(-1)
		if retry {
			// Admitted: it stays claimed and is submitted (with its key) as
			// soon as agentd takes it.
			s.sub.forget(r.ID)
			s.sub.add(r)
		} else {
			s.sub.forget(r.ID)
		}
		if cur, err := getRun(ctx, s.db.SQL(), r.ID); err == nil {
			r = cur
		}
	}
	return api.AutomationRunResult{Run: &r.AutomationRun, Duplicate: dup}, nil
}

func (s *Scheduler) runs(ctx context.Context, p runsParams) (api.AutomationRunsResult, error) {
	if _, err := getAutomation(ctx, s.db.SQL(), p.AutomationID); err != nil {
		return api.AutomationRunsResult{}, err
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return api.AutomationRunsResult{}, err
	}
	q := `SELECT ` + runColumns + ` FROM automation_runs WHERE automation_id = ?`
	args := []any{p.AutomationID}
	if p.Cursor != "" {
		at, id, err := decodeCursor(p.Cursor)
		if err != nil {
			return api.AutomationRunsResult{}, err
		}
		q += ` AND (scheduled_at, id) < (?, ?)`
		args = append(args, at, id)
	}
	q += ` ORDER BY scheduled_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	out, err := queryAll(ctx, s.db.SQL(), scanRun, q, args...)
	if err != nil {
		return api.AutomationRunsResult{}, err
	}
	res := api.AutomationRunsResult{}
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		res.NextCursor = encodeCursor(ms(last.ScheduledAt), last.ID)
	}
	res.Runs = wireRuns(out)
	return res, nil
}

// wireRuns are the runs' wire forms (nil stays nil, as before: null).
func wireRuns(runs []*Run) []*api.AutomationRun {
	if runs == nil {
		return nil
	}
	out := make([]*api.AutomationRun, len(runs))
	for i, r := range runs {
		out[i] = &r.AutomationRun
	}
	return out
}
