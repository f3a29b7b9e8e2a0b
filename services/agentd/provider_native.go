package agentd

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/native"
	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// nativeProvider runs turns with deepcode's own agent runtime
// (runtime/native): the model API is spoken from agentd itself and the
// tools run from it, each call journaled before it runs.
type nativeProvider struct{}

// CanSteer: steered input goes to the model with its next request.
func (nativeProvider) CanSteer() bool { return true }

func (nativeProvider) Run(ctx context.Context, t *runtime.TurnRun) error {
	// The native runtime writes to the journal itself (its tool calls are
	// durable before they run): it needs agentd's own sink, which is the
	// only one a turn has.
	s, ok := t.Sink.(*journalSink)
	if !ok {
		return errs.New(errs.Internal, "the deepcode provider runs only with agentd's journal")
	}
	key, err := nativeCredential(t.Profile)
	if err != nil {
		return err
	}
	return native.Run(ctx, native.Turn{
		ThreadID: t.ThreadID, TurnID: t.TurnID, Workspace: t.Workspace,
		ProfileName: t.ProfileName, Profile: t.Profile, Model: t.Model, Reasoning: t.Reasoning,
		APIKey: key, ToolEnv: nativeToolEnv(t.Profile), Steer: t.Steer,
	}, &nativeHost{s: s})
}

// nativeKeys are the variables that hold a model API's key.
func nativeKeys(api string) []string {
	if api == "anthropic" {
		return []string{"ANTHROPIC_API_KEY"}
	}
	return []string{"OPENAI_API_KEY"}
}

// nativeCredential is the model API's key: from the profile's credential
// file, its env table, or agentd's own environment, in that order ("" for
// a server that needs none).
func nativeCredential(p config.Profile) (string, error) {
	names := nativeKeys(p.API)
	if p.CredentialsFile != "" {
		creds, err := runtime.ReadCredentials(p.CredentialsFile)
		if err != nil {
			return "", err
		}
		for _, n := range names {
			if v := creds[n]; v != "" {
				return v, nil
			}
		}
	}
	for _, n := range names {
		if v := p.Env[n]; v != "" {
			return v, nil
		}
	}
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v, nil
		}
	}
	return "", nil
}

// nativeToolEnv is the environment of the shell tool's commands: agentd's
// own without deepcode's settings (but DEEPCODE_HOME) and without any
// provider's credentials, plus the profile's env table (but the key).
func nativeToolEnv(p config.Profile) []string {
	var secret []string
	for _, names := range runtime.ProviderSecrets {
		secret = append(secret, names...)
	}
	secret = append(secret, nativeKeys("anthropic")...)
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "DEEPCODE_") && k != "DEEPCODE_HOME") || slices.Contains(secret, k) {
			continue
		}
		env = append(env, kv)
	}
	for _, k := range runtime.SortedKeys(p.Env) {
		if slices.Contains(secret, k) {
			continue
		}
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		env = append(env, k+"="+p.Env[k])
	}
	return env
}

// nativeHost is native.Host over agentd's journal: the Sink's ordered
// output, plus the durable steps a tool call takes before it runs.
type nativeHost struct{ s *journalSink }

func (h *nativeHost) StartItem(kind string, payload any) string { return h.s.StartItem(kind, payload) }
func (h *nativeHost) Delta(itemID string, delta any)            { h.s.Delta(itemID, delta) }
func (h *nativeHost) CompleteItem(itemID, status string, payload any) {
	h.s.CompleteItem(itemID, status, payload)
}
func (h *nativeHost) Response(text string) { h.s.Response(text) }

func (h *nativeHost) Usage(u native.Usage) {
	h.s.Usage(runtime.UsagePayload{InputTokens: u.InputTokens, CachedInputTokens: u.CachedInputTokens, OutputTokens: u.OutputTokens,
		ReasoningTokens: u.ReasoningTokens, TotalTokens: u.TotalTokens})
}

func (h *nativeHost) SaveBlob(itemID, name string, data []byte) {
	data = slices.Clone(data)
	h.s.e.j.enqueue(func(w *txw) error {
		_, err := w.Exec(`INSERT INTO item_blobs (item_id, name, data, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (item_id, name) DO UPDATE SET data = excluded.data, created_at = excluded.created_at`, itemID, name, data, ms(w.now))
		return err
	})
}

func (h *nativeHost) ProposeItems(ctx context.Context, items []native.NewItem) ([]string, error) {
	ids := make([]string, len(items))
	raws := make([][]byte, len(items))
	for i, it := range items {
		ids[i] = newID("item_")
		raws[i], _ = json.Marshal(it.Payload)
	}
	s := h.s
	err := s.e.j.do(ctx, func(w *txw) error {
		for i, it := range items {
			if _, err := w.Exec(`INSERT INTO items (id, thread_id, turn_id, kind, status, payload, created_at, updated_at) VALUES (?, ?, ?, ?, 'inProgress', ?, ?, ?)`,
				ids[i], s.threadID, s.turnID, it.Kind, string(raws[i]), ms(w.now), ms(w.now)); err != nil {
				return err
			}
			item := Item{ID: ids[i], ThreadID: s.threadID, TurnID: s.turnID, Kind: it.Kind, Status: ItemInProgress, Payload: raws[i], CreatedAt: w.now, UpdatedAt: w.now}
			if _, err := w.Append(s.threadID, EventItemStarted, map[string]any{"item": item}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

func (h *nativeHost) UpdateItem(ctx context.Context, itemID string, payload any, delta any) error {
	raw, _ := json.Marshal(payload)
	s := h.s
	return s.e.j.do(ctx, func(w *txw) error {
		if _, err := w.Exec(`UPDATE items SET payload = ?, updated_at = ? WHERE id = ?`, string(raw), ms(w.now), itemID); err != nil {
			return err
		}
		_, err := w.Append(s.threadID, EventItemDelta, map[string]any{"turnId": s.turnID, "itemId": itemID, "delta": delta})
		return err
	})
}

func (h *nativeHost) Approve(ctx context.Context, policy, kind, summary string, details any) (bool, error) {
	s := *h.s
	s.policy = policy
	return s.Approve(ctx, kind, summary, details)
}

func (h *nativeHost) History(ctx context.Context) ([]native.Item, error) {
	s := h.s
	// Through the thread's turns (turns' (thread_id, ordinal) key), then
	// each turn's items (items_by_turn): items has no index on thread_id,
	// and filtering on it scanned every item of every thread, a cost that
	// grew with the database, not with the thread.
	rows, err := s.e.q.QueryContext(ctx, `SELECT i.id, i.turn_id, i.kind, i.status, i.payload FROM turns t JOIN items i ON i.turn_id = t.id
		WHERE t.thread_id = ? AND t.ordinal <= (SELECT ordinal FROM turns WHERE id = ?)
		  AND i.kind IN ('userMessage', 'agentMessage', 'commandExecution', 'fileChange', 'toolCall')
		ORDER BY t.ordinal, i.rowid`, s.threadID, s.turnID)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []native.Item
	for rows.Next() {
		var it native.Item
		var payload string
		if err := rows.Scan(&it.ID, &it.TurnID, &it.Kind, &it.Status, &payload); err != nil {
			return nil, dbErr(err)
		}
		it.Payload = json.RawMessage(payload)
		out = append(out, it)
	}
	return out, dbErr(rows.Err())
}

// recoverToolCalls settles the deepcode provider's tool calls that a
// crashed agentd left unfinished in a turn (native.RecoverCall): running
// ones become unknown, proposed ones notRun. Other providers' items are
// left as they are.
func recoverToolCalls(w *txw, threadID, turnID string) error {
	rows, err := w.Query(`SELECT id, payload FROM items WHERE turn_id = ? AND status = 'inProgress' AND kind IN ('commandExecution', 'fileChange', 'toolCall')`, turnID)
	if err != nil {
		return err
	}
	type open struct{ id, payload string }
	var items []open
	for rows.Next() {
		var o open
		if err := rows.Scan(&o.id, &o.payload); err != nil {
			rows.Close()
			return err
		}
		items = append(items, o)
	}
	rows.Close()
	for _, o := range items {
		settled, status, ok := native.RecoverCall(json.RawMessage(o.payload))
		if !ok {
			continue
		}
		if _, err := w.Exec(`UPDATE items SET status = ?, payload = ?, updated_at = ? WHERE id = ?`, status, string(settled), ms(w.now), o.id); err != nil {
			return err
		}
		it, err := scanItem(w.QueryRow(`SELECT `+itemColumns+` FROM items WHERE id = ?`, o.id))
		if err != nil {
			return err
		}
		if _, err := w.Append(threadID, EventItemCompleted, map[string]any{"item": it}); err != nil {
			return err
		}
	}
	return nil
}
