package native

import (
	"encoding/json"
	"fmt"
)

// What the model is told of calls that did not simply run.
const (
	unknownResult = "deepcode stopped (its service was killed or crashed) while this call ran: whether it finished, and what it did, is unknown. " +
		"It was not run again. Inspect the state it may have changed before you repeat it."
	deniedResult    = "The user denied this call: it did not run."
	cancelledResult = "The turn was interrupted before this call ran: it did not run."
	notRunResult    = "deepcode stopped before this call ran: it did not run."
)

// UserPayload is the part of agentd's user input payload the runtime reads.
type userPayload struct {
	Text          string `json:"text"`
	Submission    string `json:"submission"`
	DeliveryState string `json:"deliveryState"`
}

// conversation is a thread's history as model entries.
type conversation struct {
	entries []entry
	// repropose are the calls that never ran because agentd stopped
	// before they could: the turn proposes them again before its first
	// model request.
	repropose []pendingCall
}

// pendingCall is a call to propose again, and where its result goes.
type pendingCall struct {
	from    string // the item that holds the call's latest (notRun) record
	payload ToolPayload
	result  int // index of the result entry in the conversation
}

// replay turns the thread's items into the conversation the model is
// given. A tool call's latest record (a call proposed again in a later turn
// is recorded twice) gives its result; a call whose latest record is notRun
// is to be proposed again.
func replay(items []Item) conversation {
	latest := map[string]int{} // call id → index of its latest item
	payloads := make([]*ToolPayload, len(items))
	for i, it := range items {
		switch it.Kind {
		case KindCommandExecution, KindFileChange, KindToolCall:
		default:
			continue
		}
		var p ToolPayload
		if json.Unmarshal(it.Payload, &p) != nil || p.CallID == "" || p.Tool == "" {
			continue // another provider's item
		}
		payloads[i] = &p
		latest[p.CallID] = i
	}
	var c conversation
	// The results of a group of calls (one answer's) follow all its calls.
	type result struct {
		e       entry
		pending *pendingCall
	}
	var group []result
	groupTurn, groupStep := "", -1
	flush := func() {
		for _, r := range group {
			if r.pending != nil {
				r.pending.result = len(c.entries)
				c.repropose = append(c.repropose, *r.pending)
			}
			c.entries = append(c.entries, r.e)
		}
		group = group[:0]
	}
	for i, it := range items {
		p := payloads[i]
		if p == nil || it.TurnID != groupTurn || p.Step != groupStep {
			flush()
		}
		switch it.Kind {
		case KindUserMessage:
			var p userPayload
			if json.Unmarshal(it.Payload, &p) != nil || p.Text == "" {
				continue
			}
			if p.Submission == "steer" && p.DeliveryState != "accepted" {
				continue // never reached the turn
			}
			c.entries = append(c.entries, entry{kind: userText, text: p.Text, item: it.ID, turn: it.TurnID})
		case KindAgentMessage:
			var p MessagePayload
			if json.Unmarshal(it.Payload, &p) != nil || p.Text == "" {
				continue
			}
			c.entries = append(c.entries, entry{kind: assistantText, text: p.Text, item: it.ID, turn: it.TurnID})
		default:
			if p == nil || p.ReproposedFrom != "" {
				continue // a call proposed again answers at its first record
			}
			groupTurn, groupStep = it.TurnID, p.Step
			call := callSpec{ID: p.CallID, Name: p.Tool, Args: string(p.Arguments)}
			if len(p.Arguments) == 0 {
				call.Args = "{}"
			}
			c.entries = append(c.entries, entry{kind: toolCallEntry, call: call, item: it.ID, turn: it.TurnID})
			last := payloads[latest[p.CallID]]
			lastItem := items[latest[p.CallID]]
			res := result{e: entry{kind: toolResultEntry, call: call, item: it.ID, turn: it.TurnID}}
			switch last.State {
			case StateCompleted:
				res.e.text = last.Result
			case StateFailed, StateDenied, StateCancelled, StateUnknown:
				res.e.text, res.e.isError = last.Result, true
				if res.e.text == "" {
					res.e.text = map[string]string{StateDenied: deniedResult, StateCancelled: cancelledResult, StateUnknown: unknownResult}[last.State]
				}
				if res.e.text == "" {
					res.e.text = "The call failed: " + last.Error
				}
			default: // notRun, or a record a crash left unsettled
				res.e.text, res.e.isError = notRunResult, true
				if last.State == StateNotRun || last.State == StateProposed {
					res.pending = &pendingCall{from: lastItem.ID, payload: *last}
				}
			}
			group = append(group, res)
		}
	}
	flush()
	return c
}

// RecoverCall settles a tool call that an agentd found unfinished after a
// crash, given its item's payload: a call that was running becomes unknown
// (it is never run again, and the model is told its outcome is unknown), a
// call still proposed becomes notRun (the thread's next turn proposes it
// again). ok is false for anything else (settled calls, other providers'
// items), which stays as it is.
func RecoverCall(payload json.RawMessage) (settled json.RawMessage, status string, ok bool) {
	var p ToolPayload
	if json.Unmarshal(payload, &p) != nil || p.CallID == "" || p.Tool == "" {
		return nil, "", false
	}
	switch p.State {
	case StateRunning:
		p.State, p.Result = StateUnknown, unknownResult
		p.Error = "deepcode stopped while this call ran; its outcome is unknown and it was not run again"
	case StateProposed:
		p.State = StateNotRun
		p.Error = "deepcode stopped before this call ran; the thread's next turn proposes it again"
	default:
		return nil, "", false
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, "", false
	}
	return b, ItemFailed, true
}

// estimateTokens is a rough token count of an entry (4 bytes a token).
func estimateTokens(e entry) int {
	return (len(e.text)+len(e.call.Args)+len(e.call.Name))/4 + 4
}

// trim fits the conversation into budget tokens: whole older turns are left
// out, oldest first (never the current turn), then the current turn's
// longest tool results are shortened. It returns what it left out.
func trim(entries []entry, budget int, current string) ([]entry, TrimPayload) {
	tp := TrimPayload{Budget: budget}
	total := 0
	for _, e := range entries {
		total += estimateTokens(e)
	}
	if total <= budget {
		tp.KeptTokens = total
		return entries, tp
	}
	start := 0
	for start < len(entries) && total > budget && entries[start].turn != current {
		turn := entries[start].turn
		tp.DroppedTurns++
		for start < len(entries) && entries[start].turn == turn {
			total -= estimateTokens(entries[start])
			if entries[start].kind != toolResultEntry {
				tp.DroppedItems++
			}
			start++
		}
	}
	out := append([]entry(nil), entries[start:]...)
	for i := range out {
		if total <= budget {
			break
		}
		if out[i].kind == toolResultEntry && len(out[i].text) > 2048 {
			before := estimateTokens(out[i])
			out[i].text = headTail(out[i].text, 1024, 1024)
			total -= before - estimateTokens(out[i])
		}
	}
	tp.KeptTokens = total
	return out, tp
}

// headTail keeps the first head and last tail bytes of s (whole runes),
// saying how much it left out.
func headTail(s string, head, tail int) string {
	if len(s) <= head+tail+64 {
		return s
	}
	h := validUTF8Prefix(s[:head])
	t := validUTF8Suffix(s[len(s)-tail:])
	return fmt.Sprintf("%s\n[… %d bytes left out …]\n%s", h, len(s)-len(h)-len(t), t)
}
