package native

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/testkit/fakemodel"
)

func TestMain(m *testing.M) {
	SandboxMain() // the shell tool's sandbox helper is this binary
	os.Exit(m.Run())
}

// memHost is a Host that keeps the thread in memory, as agentd's journal
// keeps it in SQLite: the tests drive the runtime without agentd.
type memHost struct {
	mu       sync.Mutex
	turn     string
	items    []Item
	deltas   map[string][]json.RawMessage
	blobs    map[string][]byte
	response string
	usage    []Usage
	// approvals asked; decide answers the "ask" ones (nil: approve).
	approvals []approvalAsk
	decide    func(a approvalAsk) (bool, error)
	// proposed and updated record the durable steps in order.
	journal []string
	n       int
}

type approvalAsk struct {
	Policy, Kind, Summary string
	Details               ApprovalDetails
}

func newMemHost() *memHost {
	return &memHost{deltas: map[string][]json.RawMessage{}, blobs: map[string][]byte{}}
}

func (h *memHost) id() string { h.n++; return fmt.Sprintf("item_%04d", h.n) }

func (h *memHost) add(kind, status string, payload any) string {
	raw, _ := json.Marshal(payload)
	id := h.id()
	h.items = append(h.items, Item{ID: id, TurnID: h.turn, Kind: kind, Status: status, Payload: raw})
	return id
}

func (h *memHost) find(id string) *Item {
	for i := range h.items {
		if h.items[i].ID == id {
			return &h.items[i]
		}
	}
	return nil
}

func (h *memHost) StartItem(kind string, payload any) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.add(kind, ItemInProgress, payload)
}

func (h *memHost) Delta(itemID string, delta any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	raw, _ := json.Marshal(delta)
	h.deltas[itemID] = append(h.deltas[itemID], raw)
}

func (h *memHost) CompleteItem(itemID, status string, payload any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	raw, _ := json.Marshal(payload)
	if it := h.find(itemID); it != nil {
		it.Status, it.Payload = status, raw
		h.journal = append(h.journal, itemID+" "+status+" "+stateOf(raw))
	}
}

func (h *memHost) SaveBlob(itemID, name string, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.blobs[itemID+"/"+name] = append([]byte(nil), data...)
}

func (h *memHost) Response(text string) { h.mu.Lock(); h.response = text; h.mu.Unlock() }
func (h *memHost) Usage(u Usage)        { h.mu.Lock(); h.usage = append(h.usage, u); h.mu.Unlock() }

func (h *memHost) ProposeItems(ctx context.Context, items []NewItem) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, it := range items {
		id := h.add(it.Kind, ItemInProgress, it.Payload)
		raw, _ := json.Marshal(it.Payload)
		h.journal = append(h.journal, id+" proposed "+stateOf(raw))
		ids = append(ids, id)
	}
	return ids, nil
}

func (h *memHost) UpdateItem(ctx context.Context, itemID string, payload any, delta any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	raw, _ := json.Marshal(payload)
	it := h.find(itemID)
	if it == nil {
		return fmt.Errorf("no item %s", itemID)
	}
	it.Payload = raw
	h.journal = append(h.journal, itemID+" updated "+stateOf(raw))
	d, _ := json.Marshal(delta)
	h.deltas[itemID] = append(h.deltas[itemID], d)
	return nil
}

func (h *memHost) Approve(ctx context.Context, policy, kind, summary string, details any) (bool, error) {
	d, _ := details.(ApprovalDetails)
	a := approvalAsk{Policy: policy, Kind: kind, Summary: summary, Details: d}
	h.mu.Lock()
	h.approvals = append(h.approvals, a)
	decide := h.decide
	h.mu.Unlock()
	switch policy {
	case "auto":
		return true, nil
	case "never":
		return false, nil
	}
	if decide == nil {
		return true, nil
	}
	return decide(a)
}

func (h *memHost) History(context.Context) ([]Item, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Item(nil), h.items...), nil
}

func stateOf(raw json.RawMessage) string {
	var p struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(raw, &p)
	return p.State
}

// rig is a fake model, a workspace and a thread in memory.
type rig struct {
	t     *testing.T
	model *fakemodel.Server
	ws    string
	h     *memHost
	prof  config.Profile
	turns int
	steer chan string
	key   string
}

func newRig(t *testing.T, api string) *rig {
	t.Helper()
	m, err := fakemodel.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	base := m.URL + "/v1"
	if api == "anthropic" {
		base = m.URL
	}
	return &rig{t: t, model: m, ws: t.TempDir(), h: newMemHost(), steer: make(chan string, 4), key: "sk-test",
		prof: config.Profile{Provider: "deepcode", API: api, BaseURL: base, Model: "fake-model", ApprovalPolicy: "auto"}}
}

// turn runs one turn with prompt as its input.
func (r *rig) turn(ctx context.Context, prompt string) error {
	r.t.Helper()
	r.turns++
	r.h.mu.Lock()
	r.h.turn = fmt.Sprintf("turn_%d", r.turns)
	r.h.add(KindUserMessage, ItemCompleted, map[string]string{"text": prompt, "submission": "start"})
	r.h.mu.Unlock()
	return Run(ctx, Turn{ThreadID: "thr_test", TurnID: r.h.turn, Workspace: r.ws, ProfileName: "test", Profile: r.prof,
		APIKey: r.key, TempDir: r.t.TempDir(), Steer: r.steer}, r.h)
}

// mustTurn runs a turn that must complete.
func (r *rig) mustTurn(prompt string) {
	r.t.Helper()
	if err := r.turn(context.Background(), prompt); err != nil {
		r.t.Fatalf("turn %q: %v", prompt, err)
	}
}

// itemsOf returns this rig's items of kind (all turns).
func (r *rig) itemsOf(kind string) []Item {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	var out []Item
	for _, it := range r.h.items {
		if it.Kind == kind {
			out = append(out, it)
		}
	}
	return out
}

// tool returns the payload of the n-th tool item (all kinds, from 0).
func (r *rig) tools() []ToolPayload {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	var out []ToolPayload
	for _, it := range r.h.items {
		switch it.Kind {
		case KindCommandExecution, KindFileChange, KindToolCall:
			var p ToolPayload
			if json.Unmarshal(it.Payload, &p) == nil && p.CallID != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func (r *rig) lastRequest() fakemodel.Request {
	reqs := r.model.Requests()
	if len(reqs) == 0 {
		r.t.Fatal("no model request")
	}
	return reqs[len(reqs)-1]
}

var dialects = []string{"responses", "chat", "anthropic"}
