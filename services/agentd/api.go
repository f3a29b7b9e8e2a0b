package agentd

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Input limits.
const (
	maxMessageID = 128
	maxTextBytes = 256 << 10
	maxTitle     = 256
)

func (a *Agentd) methods(mux *rpc.Mux) {
	mux.HandleFunc(api.MethodInitialize, a.initialize)
	a.transcriptMethods(mux)
	mux.Handle(api.MethodThreadStart, rpc.Method(a.threadStart))
	mux.Handle(api.MethodThreadWorkspace, rpc.Method(a.threadWorkspace))
	mux.Handle(api.MethodThreadList, rpc.Method(func(ctx context.Context, p api.PageParams) (api.ThreadListResult, error) {
		limit, err := pageLimit(p.Limit, 50, 200)
		if err != nil {
			return api.ThreadListResult{}, err
		}
		ths, next, err := listThreadsIn(ctx, a.e.q, "", p.Cursor, limit, p.Archived)
		if err != nil {
			return api.ThreadListResult{}, err
		}
		return api.ThreadListResult{Threads: nonNil(ths), NextCursor: next}, nil
	}))
	mux.Handle(api.MethodThreadRead, rpc.Method(func(ctx context.Context, p api.ThreadRef) (api.ThreadReadResult, error) {
		th, err := getThread(ctx, a.e.q, p.ThreadID)
		if err != nil {
			return api.ThreadReadResult{}, err
		}
		turns, err := threadTurns(ctx, a.e.q, p.ThreadID)
		if err != nil {
			return api.ThreadReadResult{}, err
		}
		return api.ThreadReadResult{Thread: th, Turns: nonNil(turns)}, nil
	}))
	mux.Handle(api.MethodTurnStart, rpc.Method(func(ctx context.Context, p TurnSubmitParams) (TurnSubmitResult, error) {
		return a.submit(ctx, SubmitStart, p)
	}))
	mux.Handle(api.MethodTurnEnqueue, rpc.Method(func(ctx context.Context, p TurnSubmitParams) (TurnSubmitResult, error) {
		return a.submit(ctx, SubmitEnqueue, p)
	}))
	mux.Handle(api.MethodTurnSteer, rpc.Method(a.steer))
	mux.Handle(api.MethodTurnInterrupt, rpc.Method(a.interrupt))
	mux.Handle(api.MethodTurnRead, rpc.Method(func(ctx context.Context, p api.TurnRef) (api.TurnReadResult, error) {
		if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
			return api.TurnReadResult{}, err
		}
		t, err := getTurn(ctx, a.e.q, p.ThreadID, p.TurnID)
		if err != nil {
			return api.TurnReadResult{}, err
		}
		items, err := turnItems(ctx, a.e.q, p.TurnID)
		if err != nil {
			return api.TurnReadResult{}, err
		}
		return api.TurnReadResult{Turn: t, Items: nonNil(items)}, nil
	}))
	mux.Handle(api.MethodTurnInputRead, rpc.Method(func(ctx context.Context, p api.TurnInputReadParams) (api.TurnInputReadResult, error) {
		if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
			return api.TurnInputReadResult{}, err
		}
		if err := checkMessageID(p.MessageID); err != nil {
			return api.TurnInputReadResult{}, err
		}
		r, err := receiptByKey(ctx, a.e.q, p.ThreadID, p.MessageID)
		if err != nil || r == nil {
			return api.TurnInputReadResult{}, err
		}
		return api.TurnInputReadResult{Item: &r.Item}, nil
	}))
	mux.Handle(api.MethodEventReplay, rpc.Method(a.replay))
	a.blobMethods(mux)
	mux.Handle(api.MethodApprovalList, rpc.Method(func(ctx context.Context, p api.ApprovalListParams) (api.ApprovalListResult, error) {
		if p.ThreadID != "" {
			if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
				return api.ApprovalListResult{}, err
			}
		}
		as, err := pendingApprovals(ctx, a.e.q, p.ThreadID)
		if err != nil {
			return api.ApprovalListResult{}, err
		}
		return api.ApprovalListResult{Approvals: as}, nil
	}))
	mux.Handle(api.MethodApprovalReply, rpc.Method(a.respond))
	a.agentMethods(mux)
	a.threadAdminMethods(mux)
}

// initialize checks the protocol version and subscribes the connection to
// live events before it returns, so a client that installs its listener
// first and then replays misses nothing.
func (a *Agentd) initialize(ctx context.Context, req *rpc.Request) (any, error) {
	if _, err := api.BindInitialize(req.Params); err != nil {
		return nil, err
	}
	a.subscribe(req.Peer)
	return api.NewInitializeResult(), nil
}

func pageLimit(v, def, max int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > max:
		return 0, errs.New(errs.InvalidParams, "limit must be between 1 and %d", max)
	}
	return v, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func checkMessageID(id string) error {
	if id == "" || len(id) > maxMessageID || !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errs.New(errs.InvalidParams, "messageId must be 1 to %d printable characters, chosen by the client and kept for retries", maxMessageID)
	}
	return nil
}

func checkText(text string) error {
	if strings.TrimSpace(text) == "" {
		return errs.New(errs.InvalidParams, "input.text must not be empty")
	}
	if len(text) > maxTextBytes {
		return errs.New(errs.InvalidParams, "input.text is %d bytes; the limit is %d", len(text), maxTextBytes)
	}
	return nil
}

// resolveWorkspace makes the workspace path canonical.
func resolveWorkspace(p string) (string, error) {
	if p == "" {
		return "", errs.New(errs.InvalidParams, "workspace is required")
	}
	if !filepath.IsAbs(p) {
		return "", errs.New(errs.InvalidParams, "workspace must be an absolute path, not %q", p)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", errs.New(errs.NotFound, "workspace %s does not exist", p)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", errs.New(errs.InvalidParams, "workspace %s is not a folder", p)
	}
	return real, nil
}

func (a *Agentd) checkProfile(name string) error {
	if _, ok := a.cfg.Profile(name); ok {
		return nil
	}
	var names []string
	for n := range a.cfg.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return errs.New(errs.InvalidParams, "unknown profile %q; configured profiles: %s", name, strings.Join(names, ", "))
}

// trustWorkspace records the workspace and, with grant, its trust; an
// untrusted workspace is refused.
func trustWorkspace(w *txw, workspace string, grant bool, by string) error {
	if _, err := w.Exec(`INSERT INTO workspaces (path) VALUES (?) ON CONFLICT (path) DO NOTHING`, workspace); err != nil {
		return err
	}
	if grant {
		_, err := w.Exec(`UPDATE workspaces SET trusted = 1, trusted_at = ?, trusted_by = ? WHERE path = ? AND trusted = 0`, ms(w.now), by, workspace)
		return err
	}
	var trusted int
	if err := w.QueryRow(`SELECT trusted FROM workspaces WHERE path = ?`, workspace).Scan(&trusted); err != nil {
		return err
	}
	if trusted != 1 {
		return errs.New(errs.WorkspaceUntrusted, "workspace %s is not trusted: run again with --trust to grant it (recorded once)", workspace)
	}
	return nil
}

func (a *Agentd) threadStart(ctx context.Context, p ThreadStartParams) (api.ThreadResult, error) {
	th, err := a.createThread(ctx, p, "thread")
	if err != nil {
		return api.ThreadResult{}, err
	}
	return api.ThreadResult{Thread: th}, nil
}

func (a *Agentd) createThread(ctx context.Context, p ThreadStartParams, kind string) (Thread, error) {
	if err := a.requireOwner(); err != nil {
		return Thread{}, err
	}
	ws, err := resolveWorkspace(p.Workspace)
	if err != nil {
		return Thread{}, err
	}
	if p.Profile == "" {
		p.Profile = a.cfg.DefaultProfile()
	}
	if err := a.checkProfile(p.Profile); err != nil {
		return Thread{}, err
	}
	if len(p.Title) > maxTitle || !utf8.ValidString(p.Title) {
		return Thread{}, errs.New(errs.InvalidParams, "title must be valid UTF-8 of at most %d bytes", maxTitle)
	}
	id := newID("thr_")
	var th Thread
	err = a.j.do(ctx, func(w *txw) error {
		if err := trustWorkspace(w, ws, p.Trust, "thread/start"); err != nil {
			return err
		}
		if kind == "agent" {
			if err := checkAgentWorkspace(ctx, w, ws, ""); err != nil {
				return err
			}
		}
		if _, err := w.Exec(`INSERT INTO threads (id, workspace, profile, title, kind, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			id, ws, p.Profile, p.Title, kind, ms(w.now), ms(w.now)); err != nil {
			return err
		}
		w.transcribe(api.TranscriptRecord{Type: api.RecordThreadCreated, ThreadID: id,
			Thread: &api.TranscriptThread{Workspace: ws, Profile: p.Profile, Title: p.Title, Kind: kind}})
		var err error
		th, err = getThread(ctx, w, id)
		return err
	})
	return th, err
}

// fingerprint is the versioned SHA-256 of what a keyed submission asked
// for: its semantics, its text and the selections made explicitly (omitted
// defaults are not part of it).
func fingerprint(submission string, p TurnSubmitParams) string {
	canon := struct {
		V          int    `json:"v"`
		Submission string `json:"submission"`
		Text       string `json:"text"`
		Profile    string `json:"profile,omitempty"`
		Model      string `json:"model,omitempty"`
		Reasoning  string `json:"reasoning,omitempty"`
	}{1, submission, p.Input.Text, p.Profile, p.Model, p.Reasoning}
	b, _ := json.Marshal(canon)
	sum := sha256.Sum256(b)
	return "v1:" + hex.EncodeToString(sum[:])
}

// submit is turn/start and turn/enqueue. The receipt lookup, the conflict
// check and the insert are one transaction: two identical submissions that
// race produce one turn.
func (a *Agentd) submit(ctx context.Context, submission string, p TurnSubmitParams) (TurnSubmitResult, error) {
	var res TurnSubmitResult
	if err := a.requireOwner(); err != nil {
		return res, err
	}
	if !validID("thr_", p.ThreadID) {
		return res, errs.New(errs.NotFound, "no thread %q", p.ThreadID)
	}
	if err := checkMessageID(p.MessageID); err != nil {
		return res, err
	}
	if err := checkText(p.Input.Text); err != nil {
		return res, err
	}
	if p.Profile != "" {
		if err := a.checkProfile(p.Profile); err != nil {
			return res, err
		}
	}
	fp := fingerprint(submission, p)
	// started is a turn of an idle thread that its admission started at
	// once (startAtAdmission), with what its provider needs.
	var started *run
	var prepared *preparedRun
	err := a.j.do(ctx, func(w *txw) error {
		var th struct {
			Workspace, Profile, Kind string
			TurnCount                int
			Session                  sql.NullString
		}
		// What the admission needs of the thread (getThread's status,
		// which needs a look at the thread's turns, is not).
		err := w.QueryRowContext(ctx, `SELECT workspace, profile, kind, turn_count, provider_session_id FROM threads WHERE id = ?`, p.ThreadID).
			Scan(&th.Workspace, &th.Profile, &th.Kind, &th.TurnCount, &th.Session)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.New(errs.NotFound, "no thread %q", p.ThreadID)
		}
		if err != nil {
			return dbErr(err)
		}
		if r, err := receiptByKey(ctx, w, p.ThreadID, p.MessageID); err != nil {
			return err
		} else if r != nil {
			if r.Submission != submission || r.Fingerprint != fp {
				return errs.New(errs.DuplicateMessageConflict,
					"messageId %q was already used for a different request in this thread; use a new messageId for a new request", p.MessageID).
					With("turnId", r.Item.TurnID)
			}
			t, err := getTurn(ctx, w, p.ThreadID, r.Item.TurnID)
			if err != nil {
				return err
			}
			res = TurnSubmitResult{Turn: t, Item: r.Item, Duplicate: true}
			return nil
		}
		if err := trustWorkspace(w, th.Workspace, false, ""); err != nil {
			return err
		}
		if th.Kind == "agent" {
			if err := checkAgentWorkspace(ctx, w, th.Workspace, p.ThreadID); err != nil {
				return err
			}
		}
		var active string
		err = w.QueryRow(`SELECT id FROM `+activeTurns+` WHERE thread_id = ? AND `+activeStatus+` ORDER BY ordinal LIMIT 1`, p.ThreadID).Scan(&active)
		idle := errors.Is(err, sql.ErrNoRows)
		if submission == SubmitStart && err == nil {
			return errs.New(errs.Conflict, "turn %s is still active in this thread: use turn/enqueue to queue behind it, or turn/steer", active).With("turnId", active)
		}
		profile := p.Profile
		if profile == "" {
			profile = th.Profile
		}
		turnID, itemID := newID("turn_"), newID("item_")
		ordinal := th.TurnCount + 1
		if _, err := w.Exec(`INSERT INTO turns (id, thread_id, ordinal, status, submission, message_id, profile, model, reasoning, created_at)
			VALUES (?, ?, ?, 'queued', ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?)`,
			turnID, p.ThreadID, ordinal, submission, p.MessageID, profile, p.Model, p.Reasoning, ms(w.now)); err != nil {
			return err
		}
		if _, err := w.Exec(`UPDATE threads SET turn_count = ? WHERE id = ?`, ordinal, p.ThreadID); err != nil {
			return err
		}
		payload, _ := json.Marshal(UserPayload{Text: p.Input.Text, MessageID: p.MessageID, Submission: submission})
		if _, err := w.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, fingerprint, payload, created_at, updated_at)
			VALUES (?, ?, ?, 'userMessage', 'completed', ?, ?, ?, ?, ?)`,
			itemID, p.ThreadID, turnID, p.MessageID, fp, string(payload), ms(w.now), ms(w.now)); err != nil {
			return err
		}
		w.transcribe(api.TranscriptRecord{Type: api.RecordTurnQueued, ThreadID: p.ThreadID, TurnID: turnID,
			Turn: &api.TranscriptTurn{Ordinal: ordinal, Submission: submission, MessageID: p.MessageID, Profile: profile, Model: p.Model, Reasoning: p.Reasoning}})
		w.transcribe(api.TranscriptRecord{Type: api.RecordInput, ThreadID: p.ThreadID, TurnID: turnID,
			Input: &api.TranscriptInput{ItemID: itemID, MessageID: p.MessageID, Fingerprint: fp, Submission: submission, Text: p.Input.Text}})
		t, err := getTurn(ctx, w, p.ThreadID, turnID)
		if err != nil {
			return err
		}
		it, err := scanItem(w.QueryRow(`SELECT `+itemColumns+` FROM items WHERE id = ?`, itemID))
		if err != nil {
			return err
		}
		if _, err := w.Append(p.ThreadID, EventTurnQueued, api.TurnPayload{Turn: t}); err != nil {
			return err
		}
		if _, err := w.Append(p.ThreadID, EventItemCompleted, api.ItemPayload{Item: it}); err != nil {
			return err
		}
		// The answer shows the turn as admitted (queued), like turn.queued,
		// even when it starts in this same transaction.
		res = TurnSubmitResult{Turn: t, Item: it}
		if idle {
			started, prepared, err = a.e.startAtAdmission(w, runtime.TurnRun{
				ThreadID: p.ThreadID, TurnID: turnID, Workspace: th.Workspace, Prompt: p.Input.Text,
				ProfileName: profile, Model: t.Model, Reasoning: t.Reasoning, SessionID: th.Session.String,
			})
		}
		return err
	})
	switch {
	case started != nil && err != nil:
		// Reserved, but the admission did not commit.
		a.e.finishRun(started)
	case started != nil:
		a.e.begin(started, prepared)
	case err == nil && !res.Duplicate:
		a.e.turnQueued()
	}
	return res, err
}

// steer adds input to a running turn, with the delivery receipt the retry
// contract needs: pending (intent recorded), accepted (in the turn's
// mailbox, confirmed), unknown (cannot be established).
func (a *Agentd) steer(ctx context.Context, p TurnSteerParams) (TurnSteerResult, error) {
	var res TurnSteerResult
	if err := a.requireOwner(); err != nil {
		return res, err
	}
	if !validID("thr_", p.ThreadID) {
		return res, errs.New(errs.NotFound, "no thread %q", p.ThreadID)
	}
	if p.ExpectedTurnID == "" {
		return res, errs.New(errs.InvalidParams, "expectedTurnId is required: the id of the running turn")
	}
	if !validID("turn_", p.ExpectedTurnID) {
		// Like every id: a malformed or foreign one names nothing.
		return res, errs.New(errs.NotFound, "no turn %q", p.ExpectedTurnID)
	}
	if err := checkMessageID(p.MessageID); err != nil {
		return res, err
	}
	if err := checkText(p.Input.Text); err != nil {
		return res, err
	}
	itemID := newID("item_")
	var r *run
	recorded := false
	err := a.j.do(ctx, func(w *txw) error {
		if _, err := getThread(ctx, w, p.ThreadID); err != nil {
			return err
		}
		if rc, err := receiptByKey(ctx, w, p.ThreadID, p.MessageID); err != nil {
			return err
		} else if rc != nil {
			if rc.Submission != SubmitSteer || rc.ExpectedTurnID != p.ExpectedTurnID || rc.Text != p.Input.Text {
				return errs.New(errs.DuplicateMessageConflict,
					"messageId %q was already used for a different request in this thread; use a new messageId for a new request", p.MessageID)
			}
			switch rc.DeliveryState {
			case DeliveryAccepted:
				res = TurnSteerResult{TurnID: rc.ExpectedTurnID, DeliveryState: DeliveryAccepted, Duplicate: true}
				return nil
			case DeliveryPending:
				return errs.New(errs.InputDeliveryPending, "delivery of this input is not confirmed yet: read the receipt with turn/input/read or retry with the same messageId later").
					With("turnId", rc.ExpectedTurnID)
			default:
				return errs.New(errs.InputDeliveryUncertain, "whether this input reached turn %s cannot be established: inspect the turn; do not resend it under a new key", rc.ExpectedTurnID).
					With("turnId", rc.ExpectedTurnID)
			}
		}
		t, err := getTurn(ctx, w, p.ThreadID, p.ExpectedTurnID)
		if err != nil {
			return err
		}
		if t.Status != StatusRunning && t.Status != StatusWaitingApproval && t.Status != StatusStarting {
			return errs.New(errs.Conflict, "turn %s is %s, not running: steering needs the running turn", t.ID, t.Status).With("status", t.Status)
		}
		r = a.e.active(t.ID)
		if r == nil || r.providerOf() == nil {
			return errs.New(errs.Conflict, "turn %s is not running in this agentd", t.ID)
		}
		if !r.providerOf().CanSteer() {
			return errs.New(errs.Conflict, "the %s profile's runtime does not accept input while a turn runs: use turn/enqueue", t.Profile)
		}
		payload, _ := json.Marshal(UserPayload{Text: p.Input.Text, MessageID: p.MessageID, Submission: SubmitSteer, DeliveryState: DeliveryPending, ExpectedTurnID: p.ExpectedTurnID})
		_, err = w.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, delivery_state, expected_turn_id, payload, created_at, updated_at)
			VALUES (?, ?, ?, 'userMessage', 'completed', ?, 'pending', ?, ?, ?, ?)`,
			itemID, p.ThreadID, p.ExpectedTurnID, p.MessageID, p.ExpectedTurnID, string(payload), ms(w.now), ms(w.now))
		recorded = err == nil
		if recorded {
			// Written unknown: the transcript proves the input was
			// persisted, not that the turn's mailbox took it.
			w.transcribe(api.TranscriptRecord{Type: api.RecordInput, ThreadID: p.ThreadID, TurnID: p.ExpectedTurnID,
				Input: &api.TranscriptInput{ItemID: itemID, MessageID: p.MessageID, Submission: SubmitSteer,
					ExpectedTurnID: p.ExpectedTurnID, DeliveryState: DeliveryUnknown, Text: p.Input.Text}})
		}
		return err
	})
	if err != nil || !recorded {
		return res, err
	}
	// The intent is durable. Deliver into the turn's mailbox, and record
	// the outcome, in one journal step: the turn's end settles the receipts
	// still pending (to unknown) in a journal step of its own, which must
	// not fall between the delivery and its record (an input the runtime
	// took would then stay recorded as unknown).
	delivered := false
	err = a.j.do(context.WithoutCancel(ctx), func(w *txw) error {
		delivered = false
		var current string
		if err := w.QueryRow(`SELECT delivery_state FROM items WHERE id = ?`, itemID).Scan(&current); err != nil {
			return err
		}
		if current != DeliveryPending {
			return nil // the turn ended first and settled it
		}
		select {
		case <-r.done:
		default:
			select {
			case r.steer <- p.Input.Text:
				delivered = true
			default:
			}
		}
		state := DeliveryUnknown
		if delivered {
			state = DeliveryAccepted
		}
		payload, _ := json.Marshal(UserPayload{Text: p.Input.Text, MessageID: p.MessageID, Submission: SubmitSteer, DeliveryState: state, ExpectedTurnID: p.ExpectedTurnID})
		if _, err := w.Exec(`UPDATE items SET delivery_state = ?, payload = ?, updated_at = ? WHERE id = ?`,
			state, string(payload), ms(w.now), itemID); err != nil {
			return err
		}
		if !delivered {
			return nil
		}
		it, err := scanItem(w.QueryRow(`SELECT `+itemColumns+` FROM items WHERE id = ?`, itemID))
		if err != nil {
			return err
		}
		_, err = w.Append(p.ThreadID, EventTurnSteered, api.TurnSteeredPayload{Item: it, TurnID: p.ExpectedTurnID})
		return err
	})
	if err != nil || !delivered {
		return res, errs.New(errs.InputDeliveryUncertain, "whether this input reached turn %s cannot be established: inspect the turn; do not resend it under a new key", p.ExpectedTurnID).
			With("turnId", p.ExpectedTurnID)
	}
	return TurnSteerResult{TurnID: p.ExpectedTurnID, DeliveryState: DeliveryAccepted}, nil
}

func (a *Agentd) interrupt(ctx context.Context, p api.TurnRef) (api.TurnResult, error) {
	if err := a.requireOwner(); err != nil {
		return api.TurnResult{}, err
	}
	if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
		return api.TurnResult{}, err
	}
	t, err := getTurn(ctx, a.e.q, p.ThreadID, p.TurnID)
	if err != nil {
		return api.TurnResult{}, err
	}
	if isTerminal(t.Status) {
		return api.TurnResult{}, errs.New(errs.Conflict, "turn %s already ended (%s)", t.ID, t.Status).With("status", t.Status)
	}
	if err := a.e.interrupt(ctx, p.ThreadID, p.TurnID); err != nil {
		return api.TurnResult{}, err
	}
	t, err = getTurn(ctx, a.e.q, p.ThreadID, p.TurnID)
	if err != nil {
		return api.TurnResult{}, err
	}
	return api.TurnResult{Turn: t}, nil
}

// respond decides an approval with compare-and-set on its revision.
func (a *Agentd) respond(ctx context.Context, p RespondParams) (api.ApprovalResult, error) {
	if err := a.requireOwner(); err != nil {
		return api.ApprovalResult{}, err
	}
	decision := map[string]string{"approve": "approved", "deny": "denied"}[p.Decision]
	if decision == "" {
		return api.ApprovalResult{}, errs.New(errs.InvalidParams, `decision must be "approve" or "deny"`)
	}
	if p.Revision < 1 {
		return api.ApprovalResult{}, errs.New(errs.InvalidParams, "revision must be the approval's current revision (1 or more)")
	}
	var appr Approval
	err := a.j.do(ctx, func(w *txw) error {
		cur, err := getApproval(ctx, w, p.ApprovalID)
		if err != nil {
			return err
		}
		if cur.Status != "pending" || cur.Revision != p.Revision {
			return errs.New(errs.Conflict, "approval %s is %s at revision %d, not pending at revision %d", cur.ID, cur.Status, cur.Revision, p.Revision).
				With("revision", cur.Revision).With("status", cur.Status)
		}
		if err := resolveApproval(w, cur, decision, "client"); err != nil {
			return err
		}
		appr, err = getApproval(ctx, w, cur.ID)
		return err
	})
	if err != nil {
		return api.ApprovalResult{}, err
	}
	a.svc.Log.Info("approval answered", "thread", appr.ThreadID, "turn", appr.TurnID, "approval", appr.ID, "decision", decision)
	if r := a.e.active(appr.TurnID); r != nil {
		r.mu.Lock()
		ch := r.approvals[appr.ID]
		r.mu.Unlock()
		if ch != nil {
			select {
			case ch <- decision:
			default:
			}
		}
	}
	return api.ApprovalResult{Approval: appr}, nil
}
