package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/store"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestRetryContract is the whole retry table of the keyed methods, and the
// receipts across a restart of the service.
func TestRetryContract(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dial(t, env)
	input := func(text string) map[string]string { return map[string]string{"text": text} }

	// turn/start: an identical retry is the original turn's current
	// snapshot; a changed one is a conflict.
	th := c.newThread("script")
	first := c.submit("turn/start", th.ID, "k-start", "say one")
	if first.Duplicate || first.Turn.Status != agentd.StatusQueued || first.Item.Kind != agentd.KindUserMessage {
		t.Fatalf("turn/start: %+v", first)
	}
	again := c.submit("turn/start", th.ID, "k-start", "say one")
	if !again.Duplicate || again.Turn.ID != first.Turn.ID || again.Item.ID != first.Item.ID {
		t.Fatalf("identical retry: %+v, first %+v", again, first)
	}
	c.waitEnded(th.ID, first.Turn.ID)
	again = c.submit("turn/start", th.ID, "k-start", "say one")
	if !again.Duplicate || again.Turn.ID != first.Turn.ID || again.Turn.Status != agentd.StatusCompleted || again.Turn.Response != "one" {
		t.Fatalf("identical retry after the end: %+v", again.Turn)
	}
	if tr := c.readThread(th.ID); tr.Thread.TurnCount != 1 || len(tr.Turns) != 1 {
		t.Fatalf("retries made turns: %+v", tr)
	}
	for name, p := range map[string]map[string]any{
		"text":      {"input": input("say two")},
		"profile":   {"input": input("say one"), "profile": "script2"},
		"model":     {"input": input("say one"), "model": "m-large"},
		"reasoning": {"input": input("say one"), "reasoning": "high"},
	} {
		p["threadId"], p["messageId"] = th.ID, "k-start"
		e := c.fail("turn/start", p, errs.DuplicateMessageConflict)
		if e.Data["turnId"] != first.Turn.ID {
			t.Errorf("changed %s: conflict data %v, want the original turn", name, e.Data)
		}
	}
	// start and enqueue with one key are different requests.
	c.fail("turn/enqueue", map[string]any{"threadId": th.ID, "messageId": "k-start", "input": input("say one")}, errs.DuplicateMessageConflict)
	enq := c.submit("turn/enqueue", th.ID, "k-enq", "say three")
	c.waitEnded(th.ID, enq.Turn.ID)
	if r := c.submit("turn/enqueue", th.ID, "k-enq", "say three"); !r.Duplicate || r.Turn.ID != enq.Turn.ID {
		t.Fatalf("enqueue retry: %+v", r)
	}
	c.fail("turn/start", map[string]any{"threadId": th.ID, "messageId": "k-enq", "input": input("say three")}, errs.DuplicateMessageConflict)
	// Keys are per thread.
	other := c.newThread("script")
	if r := c.submit("turn/start", other.ID, "k-start", "say one"); r.Duplicate || r.Turn.ID == first.Turn.ID {
		t.Fatalf("the same key in another thread: %+v", r)
	}

	t.Run("concurrent identical submissions", func(t *testing.T) {
		c := dial(t, env)
		th := c.newThread("script")
		conns := make([]*conn, 10)
		for i := range conns {
			conns[i] = dial(t, env)
		}
		results := make([]agentd.TurnSubmitResult, len(conns))
		errors := make([]error, len(conns))
		var wg sync.WaitGroup
		for i, cc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				errors[i] = cc.peer.Call(ctx, "turn/start", map[string]any{"threadId": th.ID, "messageId": "k-race", "input": input("say once")}, &results[i])
			}()
		}
		wg.Wait()
		originals := 0
		for i, r := range results {
			if errors[i] != nil {
				t.Fatalf("submission %d: %v", i, errors[i])
			}
			if !r.Duplicate {
				originals++
			}
			if r.Turn.ID != results[0].Turn.ID {
				t.Fatalf("submission %d made turn %s, another made %s", i, r.Turn.ID, results[0].Turn.ID)
			}
		}
		if originals != 1 {
			t.Fatalf("%d submissions were not duplicates; want exactly 1", originals)
		}
		c.waitEnded(th.ID, results[0].Turn.ID)
		if tr := c.readThread(th.ID); tr.Thread.TurnCount != 1 || len(tr.Turns) != 1 {
			t.Fatalf("concurrent retries made turns: %+v", tr)
		}

		// Different keys racing for turn/start: one turn, the rest CONFLICT.
		th2 := c.newThread("script")
		for i, cc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				errors[i] = cc.peer.Call(ctx, "turn/start", map[string]any{"threadId": th2.ID, "messageId": fmt.Sprintf("k-%d", i), "input": input("sleep 600s")}, &results[i])
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errors {
			switch {
			case err == nil:
				won++
			case errs.Is(err, errs.Conflict):
			default:
				t.Fatalf("racing starts: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d racing turn/starts succeeded; want 1", won)
		}
		tr := c.readThread(th2.ID)
		if tr.Thread.TurnCount != 1 {
			t.Fatalf("racing starts made %d turns", tr.Thread.TurnCount)
		}
		c.must("turn/interrupt", map[string]string{"threadId": th2.ID, "turnId": tr.Turns[0].ID}, nil)
	})

	// Steering and enqueueing behind a running turn.
	st := c.newThread("script")
	t1 := c.submit("turn/start", st.ID, "k-t1", "say before\nawait-steer 600s\nsay after").Turn
	c.waitTurn(st.ID, t1.ID, agentd.StatusRunning)
	e := c.fail("turn/start", map[string]any{"threadId": st.ID, "messageId": "k-busy", "input": input("say x")}, errs.Conflict)
	if e.Data["turnId"] != t1.ID {
		t.Fatalf("turn/start while active: data %v", e.Data)
	}
	t2 := c.submit("turn/enqueue", st.ID, "k-t2", "say second").Turn
	if t2.Status != agentd.StatusQueued || t2.Ordinal != 2 {
		t.Fatalf("enqueued: %+v", t2)
	}
	steer := func(turnID, key, text string) map[string]any {
		return map[string]any{"threadId": st.ID, "expectedTurnId": turnID, "messageId": key, "input": input(text)}
	}
	// A queued turn does not take steering.
	c.fail("turn/steer", steer(t2.ID, "k-s0", "too early"), errs.Conflict)
	var sr agentd.TurnSteerResult
	c.must("turn/steer", steer(t1.ID, "k-s1", "go left"), &sr)
	if sr.TurnID != t1.ID || sr.DeliveryState != agentd.DeliveryAccepted || sr.Duplicate {
		t.Fatalf("turn/steer: %+v", sr)
	}
	ev := c.waitEvent(st.ID, agentd.EventTurnSteered)
	var steered struct {
		TurnID string      `json:"turnId"`
		Item   agentd.Item `json:"item"`
	}
	decode(t, ev.Payload, &steered)
	if steered.TurnID != t1.ID || !strings.Contains(string(steered.Item.Payload), `"deliveryState":"accepted"`) {
		t.Fatalf("turn.steered: %s", ev.Payload)
	}
	done1 := c.waitEnded(st.ID, t1.ID)
	if done1.Turn.Status != agentd.StatusCompleted || strings.Join(messages(t, done1.Items), "|") != "before|steered: go left|after" {
		t.Fatalf("steered turn: %+v %q", done1.Turn, messages(t, done1.Items))
	}
	// The queued turn runs after the first, in order.
	done2 := c.waitEnded(st.ID, t2.ID)
	if done2.Turn.Status != agentd.StatusCompleted || done2.Turn.StartedAt.Before(*done1.Turn.FinishedAt) {
		t.Fatalf("queued turn: %+v", done2.Turn)
	}
	order := []string{}
	for _, ev := range c.replayAll(st.ID) {
		if ev.Type == agentd.EventTurnStarted || ev.Type == agentd.EventTurnCompleted {
			order = append(order, ev.Type)
		}
	}
	if strings.Join(order, " ") != "turn.started turn.completed turn.started turn.completed" {
		t.Fatalf("turn order: %v", order)
	}

	// Steer retries: same request → duplicate accepted, without reinjection.
	c.must("turn/steer", steer(t1.ID, "k-s1", "go left"), &sr)
	if !sr.Duplicate || sr.DeliveryState != agentd.DeliveryAccepted || sr.TurnID != t1.ID {
		t.Fatalf("steer retry: %+v", sr)
	}
	c.fail("turn/steer", steer(t1.ID, "k-s1", "go right"), errs.DuplicateMessageConflict)
	c.fail("turn/steer", steer(t2.ID, "k-s1", "go left"), errs.DuplicateMessageConflict)
	// A key of a turn submission is not a steering key.
	c.fail("turn/steer", steer(t1.ID, "k-t1", "say before\nawait-steer 600s\nsay after"), errs.DuplicateMessageConflict)
	// An ended turn takes no steering.
	c.fail("turn/steer", steer(t1.ID, "k-s2", "late"), errs.Conflict)
	var receipt struct{ Item agentd.Item }
	c.must("turn/input/read", map[string]string{"threadId": st.ID, "messageId": "k-s1"}, &receipt)
	var up agentd.UserPayload
	decode(t, receipt.Item.Payload, &up)
	if up.DeliveryState != agentd.DeliveryAccepted || up.Submission != "steer" || up.ExpectedTurnID != t1.ID || receipt.Item.TurnID != t1.ID {
		t.Fatalf("steer receipt: %s", receipt.Item.Payload)
	}
	if n := len(c.threadEventsOf(st.ID, agentd.EventTurnSteered)); n != 1 {
		t.Fatalf("%d turn.steered events; want 1", n)
	}

	// The exec provider takes no input while it runs.
	sh := c.newThread("shell")
	ex := c.start(sh.ID, "sleep 30")
	c.waitTurn(sh.ID, ex.ID, agentd.StatusRunning)
	c.fail("turn/steer", map[string]any{"threadId": sh.ID, "expectedTurnId": ex.ID, "messageId": "k-ex", "input": input("more")}, errs.Conflict)
	c.must("turn/interrupt", map[string]string{"threadId": sh.ID, "turnId": ex.ID}, nil)

	// unknown: a mailbox that cannot take the input. The script turn
	// sleeps and never reads its mailbox, which fills up.
	full := c.newThread("script")
	ft := c.start(full.ID, "sleep 600s")
	c.waitTurn(full.ID, ft.ID, agentd.StatusRunning)
	fsteer := func(key string) map[string]any {
		return map[string]any{"threadId": full.ID, "expectedTurnId": ft.ID, "messageId": key, "input": input("input " + key)}
	}
	unknownKey := ""
	for i := range 1000 {
		key := fmt.Sprintf("k-fill-%d", i)
		err := c.call("turn/steer", fsteer(key), &sr)
		if err == nil {
			continue
		}
		if !errs.Is(err, errs.InputDeliveryUncertain) {
			t.Fatalf("steer %d: %v", i, err)
		}
		unknownKey = key
		break
	}
	if unknownKey == "" {
		t.Fatal("the mailbox never filled up")
	}
	e = c.fail("turn/steer", fsteer(unknownKey), errs.InputDeliveryUncertain)
	if e.Data["turnId"] != ft.ID {
		t.Fatalf("uncertain retry data: %v", e.Data)
	}
	c.must("turn/input/read", map[string]string{"threadId": full.ID, "messageId": unknownKey}, &receipt)
	decode(t, receipt.Item.Payload, &up)
	if up.DeliveryState != agentd.DeliveryUnknown {
		t.Fatalf("receipt of an undelivered input: %s", receipt.Item.Payload)
	}

	// pending: the intent is durable, delivery unconfirmed. The API never
	// leaves one behind when agentd is alive (intent and confirmation are
	// two commits a few microseconds apart), so the test writes the record
	// a crash between the two would leave.
	insertPendingSteer(t, env, full.ID, ft.ID, "k-pending", "input k-pending")
	e = c.fail("turn/steer", fsteer("k-pending"), errs.InputDeliveryPending)
	if e.Data["turnId"] != ft.ID {
		t.Fatalf("pending retry data: %v", e.Data)
	}
	c.fail("turn/steer", map[string]any{"threadId": full.ID, "expectedTurnId": ft.ID, "messageId": "k-pending", "input": input("changed")}, errs.DuplicateMessageConflict)
	// The turn's end settles its pending receipt to unknown.
	c.must("turn/interrupt", map[string]string{"threadId": full.ID, "turnId": ft.ID}, nil)
	c.waitEnded(full.ID, ft.ID)
	c.fail("turn/steer", fsteer("k-pending"), errs.InputDeliveryUncertain)
	c.must("turn/input/read", map[string]string{"threadId": full.ID, "messageId": "k-pending"}, &receipt)
	decode(t, receipt.Item.Payload, &up)
	if up.DeliveryState != agentd.DeliveryUnknown {
		t.Fatalf("pending receipt after the turn ended: %s", receipt.Item.Payload)
	}
	c.waitEnded(sh.ID, ex.ID)

	// Across a restart of the whole service: every receipt keeps its state.
	c.close()
	env.MustRun("service", "restart", "--timeout", "30")
	c = dial(t, env)
	c.must("turn/steer", steer(t1.ID, "k-s1", "go left"), &sr)
	if !sr.Duplicate || sr.DeliveryState != agentd.DeliveryAccepted {
		t.Fatalf("accepted steer retried after a restart: %+v", sr)
	}
	c.fail("turn/steer", fsteer(unknownKey), errs.InputDeliveryUncertain)
	c.fail("turn/steer", fsteer("k-pending"), errs.InputDeliveryUncertain)
	c.fail("turn/steer", steer(t1.ID, "k-s1", "go right"), errs.DuplicateMessageConflict)
	again = c.submit("turn/start", th.ID, "k-start", "say one")
	if !again.Duplicate || again.Turn.ID != first.Turn.ID {
		t.Fatalf("turn/start retried after a restart: %+v", again)
	}
	c.fail("turn/start", map[string]any{"threadId": th.ID, "messageId": "k-start", "input": input("say two")}, errs.DuplicateMessageConflict)
	if r := c.submit("turn/enqueue", th.ID, "k-enq", "say three"); !r.Duplicate || r.Turn.ID != enq.Turn.ID {
		t.Fatalf("enqueue retried after a restart: %+v", r)
	}
	if tr := c.readThread(th.ID); tr.Thread.TurnCount != 2 {
		t.Fatalf("retries after a restart made turns: %+v", tr.Thread)
	}
}

// threadEventsOf are the recorded live events of one type.
func (c *conn) threadEventsOf(threadID, typ string) []agentd.Event {
	var out []agentd.Event
	for _, ev := range c.threadEvents(threadID) {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// insertPendingSteer writes the record a steer leaves between its durable
// intent and its confirmation: what a crash at that instant leaves behind.
func insertPendingSteer(t *testing.T, env *testkit.Env, threadID, turnID, key, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, env.Layout("").Database)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	payload, _ := json.Marshal(agentd.UserPayload{Text: text, MessageID: key, Submission: "steer", DeliveryState: agentd.DeliveryPending, ExpectedTurnID: turnID})
	now := time.Now().UnixMilli()
	if _, err := db.SQL().ExecContext(ctx, `INSERT INTO items (id, thread_id, turn_id, kind, status, message_id, delivery_state, expected_turn_id, payload, created_at, updated_at)
		VALUES (?, ?, ?, 'userMessage', 'completed', ?, 'pending', ?, ?, ?, ?)`,
		"item_"+strings.Repeat("p", 11)+fmt.Sprintf("%05d", now%100000), threadID, turnID, key, turnID, string(payload), now, now); err != nil {
		t.Fatal(err)
	}
}
