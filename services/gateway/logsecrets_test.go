//go:build linux

package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestLogRecordsTheWorkNotTheSecrets: after a workload (a browser signs in
// with a ticket and logs out, a turn whose prompt holds a secret asks for an
// approval that a client answers), the log has a record of each step and
// none of the bearer token, the ticket, the session cookie or the secret.
func TestLogRecordsTheWorkNotTheSecrets(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	in := clienttest.StartIn(t, env)

	var link struct {
		URL string `json:"url"`
	}
	env.MustRun("web", "--no-open", "--json").JSON(t, &link)
	_, ticket, _ := strings.Cut(link.URL, "#ticket=")
	h := http.Header{"Origin": {"http://" + in.Info.Address}, "Content-Type": {"application/json"}}
	body, _ := json.Marshal(map[string]string{"ticket": ticket})
	hc := in.TCP().Client(t)
	res := in.TCP().Do(t, hc, http.MethodPost, "/auth/exchange", h, body)
	if res.Status != http.StatusOK {
		t.Fatalf("exchange: %s", res)
	}
	cookie := (&http.Response{Header: res.Header}).Cookies()
	if len(cookie) != 1 || cookie[0].Value == "" {
		t.Fatalf("no session cookie: %v", res.Header)
	}
	lh := http.Header{"Origin": {"http://" + in.Info.Address}, "Cookie": {cookie[0].Name + "=" + cookie[0].Value}}
	if res := in.TCP().Do(t, hc, http.MethodPost, "/auth/logout", lh, nil); res.Status != http.StatusOK {
		t.Fatalf("logout: %s", res)
	}

	const secret = "sk-PROMPT-SECRET-4242"
	c := mustBiz(t, in)
	thread := c.thread()
	turn := c.startTurn(thread, "m1", "approve run it "+secret+"\nsay done")
	var approvals struct {
		Approvals []api.Approval `json:"approvals"`
	}
	testkit.WaitFor(t, clienttest.Guard, "the approval request", func() bool {
		c.must(api.MethodApprovalList, map[string]any{"threadId": thread}, &approvals)
		return len(approvals.Approvals) == 1
	})
	a := approvals.Approvals[0]
	c.must(api.MethodApprovalReply, map[string]any{"approvalId": a.ID, "revision": a.Revision, "decision": "approve"}, nil)
	c.waitTurn(thread, turn.ID, agentd.StatusCompleted)

	var lines []string
	testkit.WaitFor(t, clienttest.Guard, "the turn's end in the log", func() bool {
		lines, _ = logging.Tail(in.Layout.ServiceLog(), 100000)
		return strings.Contains(strings.Join(lines, "\n"), `msg="turn ended"`)
	})
	all := strings.Join(lines, "\n")
	for what, s := range map[string]string{"the bearer token": in.Token, "the ticket": ticket, "the session cookie": cookie[0].Value, "the prompt's secret": secret} {
		if s == "" || strings.Contains(all, s) {
			t.Errorf("the log holds %s (%q)", what, s)
		}
	}
	want := map[string]func(logging.Record) bool{
		"instance started with its address": func(r logging.Record) bool {
			return r.Msg == "instance started" && r.Attr("address") == "http://"+in.Info.Address
		},
		"browser signed in":  func(r logging.Record) bool { return r.Msg == "browser signed in" },
		"browser logged out": func(r logging.Record) bool { return r.Msg == "browser logged out" },
		"turn started": func(r logging.Record) bool {
			return r.Msg == "turn started" && r.Attr("turn") == turn.ID && r.Attr("thread") == thread && r.Attr("provider") == "script"
		},
		"turn ended": func(r logging.Record) bool {
			return r.Msg == "turn ended" && r.Attr("turn") == turn.ID && r.Attr("status") == "completed" && r.Attr("duration") != nil
		},
		"approval asked":    func(r logging.Record) bool { return r.Msg == "approval asked" && r.Attr("approval") == a.ID },
		"approval answered": func(r logging.Record) bool { return r.Msg == "approval answered" && r.Attr("decision") == "approved" },
	}
	recs := logging.Records(lines, logging.Filter{})
	for what, ok := range want {
		found := false
		for _, r := range recs {
			found = found || ok(r)
		}
		if !found {
			t.Errorf("no record of %s", what)
		}
	}
	if t.Failed() {
		t.Logf("service.log:\n%s", all)
	}
}
