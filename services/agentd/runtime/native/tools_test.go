package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// call runs one turn whose model calls tool with args and returns the
// call's record and what the model was told.
func (r *rig) call(tool, args string) (ToolPayload, string) {
	r.t.Helper()
	before := len(r.tools())
	r.mustTurn(fmt.Sprintf("tool %s %s\nsay ok", tool, args))
	tp := r.tools()
	if len(tp) != before+1 {
		r.t.Fatalf("%d tool calls after %s", len(tp), tool)
	}
	res := r.lastRequest().ToolResults
	if len(res) != 1 {
		r.t.Fatalf("results %q", res)
	}
	return tp[len(tp)-1], res[0]
}

func TestTools(t *testing.T) {
	r := newRig(t, "chat")
	write := func(name, text string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(r.ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.ws, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(r.ws, name))
		return string(b)
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	write("src/main.go", "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n")
	outside := filepath.Join(t.TempDir(), "outside.txt")
	for _, c := range []struct {
		name, tool, args string
		state            string
		result           string // in what the model is told
		check            func(p ToolPayload) string
	}{
		{"shell ok", "shell", `{"command":"echo out; echo err >&2"}`, StateCompleted, "exit code 0\n", func(p ToolPayload) string {
			// stdout and stderr are two pipes: their order is the reads'.
			blob := string(r.h.blobs[r.lastTool()+"/output"])
			if p.ExitCode == nil || *p.ExitCode != 0 || p.OutputBytes != 8 || p.Blob != BlobOutput || !strings.Contains(blob, "out\n") || !strings.Contains(blob, "err\n") || len(blob) != 8 {
				return fmt.Sprintf("payload %+v blob %q", p, r.h.blobs[r.lastTool()+"/output"])
			}
			return ""
		}},
		{"shell exit code", "shell", `{"command":"echo nope; exit 3"}`, StateFailed, "exit code 3\nnope", nil},
		{"shell workdir", "shell", `{"command":"pwd","workdir":"src"}`, StateCompleted, "/src", nil},
		{"shell timeout", "shell", `{"command":"echo begun; sleep 20","timeout_seconds":1}`, StateFailed, "timed out after 1s", nil},
		{"shell missing command", "shell", `{}`, StateFailed, "command is required", nil},
		{"shell workdir outside", "shell", `{"command":"true","workdir":"/"}`, StateFailed, "outside the workspace", nil},
		{"shell argv", "shell", `{"command":["echo","vector"]}`, StateCompleted, "vector", nil},
		{"read_file", "read_file", `{"path":"src/main.go","offset":3,"limit":1}`, StateCompleted, "     3\tfunc main() {\n[… 2 more lines", nil},
		{"read_file missing", "read_file", `{"path":"nope.txt"}`, StateFailed, "nope.txt does not exist", nil},
		{"read_file outside", "read_file", js(map[string]string{"path": outside}), StateFailed, "outside the workspace", nil},
		{"read_file folder", "read_file", `{"path":"src"}`, StateFailed, "is a folder", nil},
		{"read_file bad args", "read_file", `{"file":"x"}`, StateFailed, "do not fit the tool", nil},
		{"write_file new", "write_file", `{"path":"docs/new.md","content":"# New\n"}`, StateCompleted, "created docs/new.md (6 bytes)", func(p ToolPayload) string {
			if read("docs/new.md") != "# New\n" || p.Action != "add" || !strings.Contains(p.Diff, "+# New") || p.Bytes != 6 {
				return fmt.Sprintf("file %q payload %+v", read("docs/new.md"), p)
			}
			return ""
		}},
		{"write_file replace", "write_file", `{"path":"docs/new.md","content":"# Newer\n"}`, StateCompleted, "replaced docs/new.md", func(p ToolPayload) string {
			if p.Action != "update" || !strings.Contains(p.Diff, "-# New\n+# Newer") || string(r.h.blobs[r.lastTool()+"/before"]) != "# New\n" {
				return fmt.Sprintf("payload %+v", p)
			}
			return ""
		}},
		{"write_file outside", "write_file", js(map[string]string{"path": outside, "content": "x"}), StateFailed, "outside the workspace", func(ToolPayload) string {
			if _, err := os.Stat(outside); err == nil {
				return "written outside the workspace"
			}
			return ""
		}},
		{"write_file escape", "write_file", `{"path":"../escape.txt","content":"x"}`, StateFailed, "outside the workspace", nil},
		{"edit replace", "edit", `{"path":"src/main.go","old_string":"println(\"hi\")","new_string":"println(\"hello\")"}`, StateCompleted, "replaced 1 occurrence", func(p ToolPayload) string {
			if !strings.Contains(read("src/main.go"), `println("hello")`) || !strings.Contains(p.Diff, `+	println("hello")`) {
				return fmt.Sprintf("file %q diff %q", read("src/main.go"), p.Diff)
			}
			return ""
		}},
		{"edit not found", "edit", `{"path":"src/main.go","old_string":"nothing like it","new_string":"x"}`, StateFailed, "old_string does not occur in src/main.go", nil},
		{"edit ambiguous", "edit", `{"path":"src/main.go","old_string":"main","new_string":"x"}`, StateFailed, "occurs 2 times", nil},
		{"edit patch", "edit", js(map[string]string{"path": "src/main.go", "patch": "--- a/src/main.go\n+++ b/src/main.go\n@@ -3,3 +3,4 @@\n func main() {\n \tprintln(\"hello\")\n+\tprintln(\"bye\")\n }\n"}), StateCompleted, "applied 1 hunks", func(ToolPayload) string {
			if read("src/main.go") != "package main\n\nfunc main() {\n\tprintln(\"hello\")\n\tprintln(\"bye\")\n}\n" {
				return fmt.Sprintf("file %q", read("src/main.go"))
			}
			return ""
		}},
		{"edit patch mismatch", "edit", js(map[string]string{"path": "src/main.go", "patch": "@@ -3,2 +3,2 @@\n func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"x\")\n"}), StateFailed, `hunk 1 (@@ -3,2 +3,2 @@) does not apply: line 4 is "\tprintln(\"hello\")", the hunk expects "\tprintln(\"hi\")"`, nil},
		{"edit patch garbage", "edit", `{"path":"src/main.go","patch":"not a diff"}`, StateFailed, "no hunk", nil},
		{"list", "list", `{"path":"src"}`, StateCompleted, "main.go", nil},
		{"list missing", "list", `{"path":"gone"}`, StateFailed, "gone does not exist", nil},
		{"glob", "glob", `{"pattern":"**/*.go"}`, StateCompleted, "src/main.go", nil},
		{"glob bad pattern", "glob", `{"pattern":"[unclosed"}`, StateFailed, "not a valid glob pattern", nil},
		{"grep", "grep", `{"pattern":"println\\(\"b.e\"\\)","glob":"**/*.go"}`, StateCompleted, "src/main.go:5: \tprintln(\"bye\")", nil},
		{"grep no match", "grep", `{"pattern":"zebra"}`, StateCompleted, "(no match)", nil},
		{"grep bad regexp", "grep", `{"pattern":"(unclosed"}`, StateFailed, "not a valid regular expression", nil},
		{"unknown tool", "rm_rf", `{}`, StateFailed, `there is no tool "rm_rf"`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, res := r.call(c.tool, c.args)
			if p.State != c.state || !strings.Contains(res, c.result) {
				t.Fatalf("state %s, result %q; want %s, %q (payload %+v)", p.State, res, c.state, c.result, p)
			}
			if c.check != nil {
				if msg := c.check(p); msg != "" {
					t.Fatal(msg)
				}
			}
		})
	}
}

func (r *rig) lastTool() string {
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	for i := len(r.h.items) - 1; i >= 0; i-- {
		switch r.h.items[i].Kind {
		case KindCommandExecution, KindFileChange, KindToolCall:
			return r.h.items[i].ID
		}
	}
	return ""
}

func TestSymlinkEscape(t *testing.T) {
	r := newRig(t, "responses")
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "secret"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(r.ws, "link")); err != nil {
		t.Fatal(err)
	}
	p, res := r.call("read_file", `{"path":"link/secret"}`)
	if p.State != StateFailed || !strings.Contains(res, "symbolic link") || strings.Contains(res, "s3cret") {
		t.Fatalf("%s %q", p.State, res)
	}
	r.prof.OutsideWorkspace = true
	if p, res := r.call("read_file", `{"path":"link/secret"}`); p.State != StateCompleted || !strings.Contains(res, "s3cret") {
		t.Fatalf("outside_workspace: %s %q", p.State, res)
	}
}

func TestApprovals(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		r.prof.ApprovalPolicy = "ask"
		r.h.decide = func(a approvalAsk) (bool, error) { return !strings.Contains(a.Summary, "deny-me"), nil }
		r.mustTurn("tool shell {\"command\":\"echo approved > yes.txt\"}\ntool shell {\"command\":\"echo deny-me > no.txt\"}\ntool read_file {\"path\":\"yes.txt\"}\nsay done")
		tp := r.tools()
		if tp[0].State != StateCompleted || tp[1].State != StateDenied || tp[2].State != StateCompleted || tp[2].Approval != "none" {
			t.Fatalf("states %s %s %s", tp[0].State, tp[1].State, tp[2].State)
		}
		if _, err := os.Stat(filepath.Join(r.ws, "no.txt")); err == nil {
			t.Fatal("a denied command ran")
		}
		if res := r.lastRequest().ToolResults; strings.TrimSpace(res[1]) != deniedResult {
			t.Fatalf("the model was told %q", res[1])
		}
		if len(r.h.approvals) != 2 || r.h.approvals[0].Kind != "command" || r.h.approvals[0].Details.Command != "echo approved > yes.txt" {
			t.Fatalf("approvals %+v", r.h.approvals)
		}
		// Per tool: never for shell, ask for read_file.
		r.prof.ToolApproval = map[string]string{"shell": "never", "read_file": "ask"}
		r.h.approvals = nil
		r.mustTurn("tool shell {\"command\":\"echo x > never.txt\"}\ntool read_file {\"path\":\"yes.txt\"}\ntool write_file {\"path\":\"w.txt\",\"content\":\"w\"}\nsay done")
		tp = r.tools()[3:]
		if tp[0].State != StateDenied || tp[0].Approval != "never" || tp[1].Approval != "ask" || tp[1].State != StateCompleted || tp[2].Approval != "ask" {
			t.Fatalf("per-tool policies: %+v", tp)
		}
		if a := r.h.approvals; len(a) != 3 || a[2].Kind != "fileChange" || !strings.Contains(a[2].Details.Diff, "+w") {
			t.Fatalf("approvals %+v", a)
		}
	})
}

func TestInterruptWhileAwaitingApproval(t *testing.T) {
	r := newRig(t, "anthropic")
	r.prof.ApprovalPolicy = "ask"
	asked := make(chan struct{})
	r.h.decide = func(approvalAsk) (bool, error) { close(asked); <-make(chan struct{}); return false, nil }
	ctx, cancel := context.WithCancelCause(context.Background())
	r.h.decide = func(approvalAsk) (bool, error) { close(asked); <-ctx.Done(); return false, context.Cause(ctx) }
	done := make(chan error, 1)
	go func() { done <- r.turn(ctx, "tool shell {\"command\":\"touch ran\"}\nsay no") }()
	<-asked
	cancel(errors.New("stop"))
	<-done
	if tp := r.tools(); tp[0].State != StateCancelled {
		t.Fatalf("%+v", tp)
	}
	if _, err := os.Stat(filepath.Join(r.ws, "ran")); err == nil {
		t.Fatal("the command ran")
	}
}

// TestRecoveryRules: what agentd's recovery makes of unfinished calls, and
// how the next turn treats them: unknown is told to the model and never
// run again; notRun is proposed again and runs; completed is never repeated.
func TestRecoveryRules(t *testing.T) {
	forEachDialect(t, func(t *testing.T, r *rig) {
		r.mustTurn(`tool shell {"command":"echo a >> ran.txt"}
tool shell {"command":"echo b >> ran.txt"}
tool shell {"command":"echo c >> ran.txt"}
say done`)
		// As a crash would have left them: the first completed, the second
		// running, the third proposed; recovery settles the last two.
		r.h.mu.Lock()
		var calls []*Item
		for i := range r.h.items {
			if r.h.items[i].Kind == KindCommandExecution {
				calls = append(calls, &r.h.items[i])
			}
		}
		for i, state := range []string{StateRunning, StateProposed} {
			it := calls[i+1]
			var p ToolPayload
			_ = json.Unmarshal(it.Payload, &p)
			p.State, p.Result, p.ExitCode, p.Output = state, "", nil, ""
			raw, _ := json.Marshal(p)
			settled, status, ok := RecoverCall(raw)
			if !ok || status != ItemFailed {
				t.Fatalf("RecoverCall(%s) = %v %s", state, ok, status)
			}
			it.Payload, it.Status = settled, status
		}
		r.h.mu.Unlock()
		if _, _, ok := RecoverCall(calls[0].Payload); ok {
			t.Fatal("RecoverCall changed a completed call")
		}
		if _, _, ok := RecoverCall(json.RawMessage(`{"command":["codex"]}`)); ok {
			t.Fatal("RecoverCall changed another provider's item")
		}
		if err := os.WriteFile(filepath.Join(r.ws, "ran.txt"), []byte("a\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.mustTurn("say checked")
		b, _ := os.ReadFile(filepath.Join(r.ws, "ran.txt"))
		if string(b) != "a\nc\n" {
			t.Fatalf("ran.txt %q: want the completed call not repeated, the unknown one not re-run, the notRun one run", b)
		}
		tp := r.tools()
		if len(tp) != 4 || tp[1].State != StateUnknown || tp[2].State != StateReproposed || tp[3].State != StateCompleted || tp[3].ReproposedFrom == "" {
			t.Fatalf("calls %+v", tp)
		}
		// The model's request for "say checked" carried the whole history:
		// the unknown call's result says so, and the call proposed again
		// answers where the call was.
		last := r.lastRequest()
		if last.Prompt != "say checked" || len(last.AllToolResults) != 3 || strings.TrimSpace(last.AllToolResults[1]) != unknownResult ||
			!strings.HasPrefix(last.AllToolResults[2], "exit code 0") {
			t.Fatalf("last request %q: results %q", last.Prompt, last.AllToolResults)
		}
	})
}

func TestSandbox(t *testing.T) {
	r := newRig(t, "chat")
	r.prof.Sandbox = "workspace-write"
	outside := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`echo in > inside.txt && echo tmp > "$TMPDIR/t.txt" && echo ok-writes; echo out > %s/outside.txt || echo refused-outside; `+
		`if command -v bash >/dev/null; then bash -c 'echo x > /dev/tcp/127.0.0.1/%d' && echo net-open || echo net-refused; else echo net-refused; fi`, outside, port)
	args, _ := json.Marshal(map[string]string{"command": script})
	p, res := r.call("shell", string(args))
	if strings.HasPrefix(p.Sandbox, "none") {
		t.Skipf("no sandbox here: %s", p.Sandbox)
	}
	if !strings.Contains(res, "ok-writes") || !strings.Contains(res, "refused-outside") || !strings.Contains(res, "net-refused") || !strings.Contains(p.Sandbox, "Landlock") {
		t.Fatalf("sandboxed command: %q (sandbox %q)", res, p.Sandbox)
	}
	if _, err := os.Stat(filepath.Join(outside, "outside.txt")); err == nil {
		t.Fatal("the sandboxed command wrote outside the workspace")
	}
	// network = true lets it connect.
	r.prof.Network = true
	if _, res := r.call("shell", string(args)); !strings.Contains(res, "net-open") {
		t.Fatalf("with network: %q", res)
	}
}

func TestContextBudget(t *testing.T) {
	r := newRig(t, "responses")
	r.mustTurn("say " + strings.Repeat("long answer ", 400))
	r.mustTurn("say second")
	r.prof.ContextBudget = 200
	r.mustTurn("say third")
	trims := r.itemsOf(KindContextTrimmed)
	if len(trims) != 1 {
		t.Fatalf("trim items %+v", trims)
	}
	var tp TrimPayload
	_ = json.Unmarshal(trims[0].Payload, &tp)
	if tp.DroppedTurns < 1 || tp.Budget != 200 {
		t.Fatalf("trim %+v", tp)
	}
	if tr := r.lastRequest().Transcript; strings.Contains(tr, "long answer") || !strings.Contains(tr, "say third") {
		t.Fatalf("transcript %q", tr)
	}
}

func TestSteering(t *testing.T) {
	r := newRig(t, "chat")
	r.steer <- "also mention kiwis"
	r.mustTurn("say noted")
	if tr := r.lastRequest().Transcript; !strings.Contains(tr, "kiwis") {
		t.Fatalf("the steered input did not reach the model: %q", tr)
	}
}

func TestApplyPatch(t *testing.T) {
	for _, c := range []struct {
		name, in, patch, out, err string
		existed                   bool
	}{
		{"insert", "a\nb\nc\n", "@@ -1,3 +1,4 @@\n a\n+x\n b\n c\n", "a\nx\nb\nc\n", "", true},
		{"offset", "z\nz\na\nb\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n", "z\nz\na\nB\n", "", true},
		{"two hunks", "1\n2\n3\n4\n5\n6\n", "@@ -1,2 +1,2 @@\n-1\n+one\n 2\n@@ -5,2 +5,2 @@\n 5\n-6\n+six\n", "one\n2\n3\n4\n5\nsix\n", "", true},
		{"new file", "", "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n", "hello\nworld\n", "", false},
		{"no newline", "a\nb", "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n", "a\nc\n", "", true},
		{"mismatch", "a\nb\n", "@@ -1,2 +1,2 @@\n a\n-q\n+r\n", "", `line 2 is "b", the hunk expects "q"`, true},
		{"two files", "a\n", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n", "", "more than one file", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := applyPatch([]byte(c.in), c.existed, c.patch)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || string(out) != c.out {
				t.Fatalf("%q, %v; want %q", out, err, c.out)
			}
		})
	}
}
