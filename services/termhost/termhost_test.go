//go:build !windows

package termhost_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/termhost"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/store"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestOutputDecoding: positions count the bytes of decoded text; a
// character split across writes (and so across PTY reads) is held back
// until complete, invalid bytes become U+FFFD (one per maximal subpart),
// carriage returns and control sequences are kept, and pages cut through
// multi-byte text end on character boundaries.
func TestOutputDecoding(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, true)

	// The euro sign (E2 82 AC) split over two writes with a pause between,
	// a lone invalid byte, a truncated sequence followed by ASCII, a
	// carriage return, an escape sequence, and the PTY's own CR LF.
	id := c.create(thread, "/bin/sh", "-c",
		`printf '\342\202'; sleep 0.3; printf '\254|'; sleep 0.1; printf '\377|'; printf '\342\202A|'; printf 'x\ry\033[1m\n'; sleep 0.1; printf '\360\237'; sleep 0.2; printf '\230\200.'`)
	got, last := c.waitExited(thread, id)
	want := "€|\uFFFD|\uFFFDA|x\ry\x1b[1m\r\n😀."
	if got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
	if last.HeadOffset != int64(len(want)) || !last.Exited || *last.ExitCode != 0 || last.AvailableFrom != 0 || last.Truncated {
		t.Fatalf("final page %+v", last)
	}
	// Every prefix that ends on a character boundary is a valid offset;
	// an offset inside a character is refused.
	for off := 0; off <= len(want); off++ {
		p := map[string]any{"threadId": thread, "terminalId": id, "offset": off}
		var r termhost.ReadResult
		err := c.call(api.MethodTerminalRead, p, &r)
		if off < len(want) && want[off]&0xC0 == 0x80 {
			if errs.CodeOf(err) != errs.InvalidParams {
				t.Fatalf("offset %d inside a character: %v", off, err)
			}
			continue
		}
		if err != nil || r.Data != want[off:] || r.Offset != int64(off) {
			t.Fatalf("offset %d: %+v %v", off, r, err)
		}
	}
	// The notifications carried the same text at the same offsets.
	e := c.waitExit(id)
	var notified strings.Builder
	next := int64(0)
	for _, n := range c.outputs(id) {
		if n.Offset != next || n.NextOffset-n.Offset != int64(len(n.Data)) {
			t.Fatalf("notification [%d, %d) after %d", n.Offset, n.NextOffset, next)
		}
		notified.WriteString(n.Data)
		next = n.NextOffset
	}
	if notified.String() != want {
		t.Fatalf("notified %q, want %q", notified.String(), want)
	}
	if e.NextOffset != int64(len(want)) || e.ExitCode != 0 || e.ThreadID != thread {
		t.Fatalf("exit %+v", e)
	}

	// 10 000 euro signs (30 000 bytes), paged by 4 KiB: no page is cut
	// inside a character, and together they are the text.
	id = c.create(thread, "/bin/sh", "-c", `yes '€' | head -n 10000 | tr -d '\n'`)
	got, _ = c.waitExited(thread, id)
	if got != strings.Repeat("€", 10000) {
		t.Fatalf("paged euros: %d bytes", len(got))
	}
	var b strings.Builder
	for off := int64(0); ; {
		r := c.read(thread, id, off, 4096, nil)
		if r.NextOffset-r.Offset > 4096 || (r.HasMore && r.NextOffset-r.Offset < 4094) || r.NextOffset%3 != 0 {
			t.Fatalf("page [%d, %d)", r.Offset, r.NextOffset)
		}
		b.WriteString(r.Data)
		if off = r.NextOffset; !r.HasMore {
			break
		}
	}
	if b.String() != got {
		t.Fatal("4 KiB pages differ from the whole")
	}
}

// TestTruncation: 256 KiB are retained; a read before availableFrom is
// truncated and starts there, on a character boundary.
func TestTruncation(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, true)

	id := c.create(thread, "/bin/sh", "-c", `head -c 300000 /dev/zero | tr '\0' a`)
	got, last := c.waitExited(thread, id)
	const window = 256 << 10
	if last.HeadOffset != 300000 || last.AvailableFrom != 300000-window || len(got) != window || strings.Trim(got, "a") != "" {
		t.Fatalf("head %d, availableFrom %d, %d bytes retained", last.HeadOffset, last.AvailableFrom, len(got))
	}
	r := c.read(thread, id, 100, 0, nil)
	if !r.Truncated || r.Offset != 300000-window || r.NextOffset != r.Offset+16<<10 || !r.HasMore {
		t.Fatalf("read before the window: %+v", r)
	}
	if r := c.read(thread, id, 300000-window, 0, nil); r.Truncated {
		t.Fatal("a read at availableFrom is not truncated")
	}
	// A cutoff wholly before the window: an empty, truncated page.
	if r := c.read(thread, id, 0, 0, ptr(int64(1000))); !r.Truncated || r.Data != "" || r.HasMore {
		t.Fatalf("cutoff before the window: %+v", r)
	}

	// 300 000 bytes of 3-byte characters: the window's start moves to the
	// next character boundary.
	id = c.create(thread, "/bin/sh", "-c", `yes '€' | head -n 100000 | tr -d '\n'`)
	got, last = c.waitExited(thread, id)
	if last.HeadOffset != 300000 || last.AvailableFrom%3 != 0 || last.AvailableFrom < 300000-window || last.AvailableFrom > 300000-window+3 ||
		got != strings.Repeat("€", int(300000-last.AvailableFrom)/3) {
		t.Fatalf("euros: head %d, availableFrom %d, %d bytes", last.HeadOffset, last.AvailableFrom, len(got))
	}
	// The notifications were bounded hints: offsets increase, data is
	// valid and matches its range, and the last one reaches the head.
	c.waitExit(id)
	prev := int64(0)
	for _, n := range c.outputs(id) {
		if n.Offset < prev || n.NextOffset-n.Offset != int64(len(n.Data)) || len(n.Data) > 64<<10 || n.Offset%3 != 0 {
			t.Fatalf("notification [%d, %d) after %d", n.Offset, n.NextOffset, prev)
		}
		prev = n.NextOffset
	}
	if prev != 300000 {
		t.Fatalf("notifications ended at %d", prev)
	}
}

// TestThroughCutoff: a round captured at headOffset H ends exactly at H
// while output keeps arriving.
func TestThroughCutoff(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, false)

	id := c.create(thread, "/bin/sh", "-c", `head -c 20000 /dev/zero | tr '\0' b; while :; do echo more; sleep 0.02; done`)
	var first termhost.ReadResult
	testkit.WaitFor(t, 60*time.Second, "20000 bytes", func() bool {
		first = c.read(thread, id, 0, 4096, nil)
		return first.HeadOffset >= 20000
	})
	cutoff := first.HeadOffset
	text := first.Data
	off := first.NextOffset
	for {
		r := c.read(thread, id, off, 4096, &cutoff)
		if r.NextOffset > cutoff {
			t.Fatalf("page [%d, %d) beyond the cutoff %d", r.Offset, r.NextOffset, cutoff)
		}
		text += r.Data
		off = r.NextOffset
		if !r.HasMore {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if off != cutoff || int64(len(text)) != cutoff || !strings.HasPrefix(text, strings.Repeat("b", 20000)) {
		t.Fatalf("round ended at %d, %d bytes, cutoff %d", off, len(text), cutoff)
	}
	// Let the output grow past the cutoff, then check the next round sees it.
	testkit.WaitFor(t, 60*time.Second, "more output", func() bool { return c.read(thread, id, off, 0, nil).HeadOffset > cutoff })
	r := c.read(thread, id, off, 0, nil)
	if r.Offset != cutoff || r.Data == "" || !strings.HasPrefix(r.Data, "more") {
		t.Fatalf("next round %+v", r)
	}
	// A cutoff equal to the offset is an empty page; one before it is refused.
	if r := c.read(thread, id, off, 0, &off); r.Data != "" || r.HasMore || r.NextOffset != off {
		t.Fatalf("empty round %+v", r)
	}
	c.mustFail(errs.InvalidParams, api.MethodTerminalRead, map[string]any{"threadId": thread, "terminalId": id, "offset": off, "through": off - 1})
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, nil)
}

// TestExitedWindows: exited windows are evicted oldest-first (by exit) and
// by count, and do not use live capacity.
func TestExitedWindows(t *testing.T) {
	t.Parallel()
	env := startInstance(t, "DEEPCODE_TERMHOST_MAX_EXITED=2", "DEEPCODE_TERMHOST_MAX_LIVE=2")
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, true)

	a := c.create(thread, "/bin/sh", "-c", `read x; echo A`)
	b := c.create(thread, "/bin/sh", "-c", `echo B`)
	c.waitExited(thread, b)
	d := c.create(thread, "/bin/sh", "-c", `echo C`)
	c.waitExited(thread, d)
	// b and d exited: with a still running, the two windows are full.
	// Exited windows take no live capacity: one more live terminal fits.
	e := c.create(thread, "/bin/sh", "-c", `read x; echo E`)
	c.mustFail(errs.Overloaded, api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24, "command": []string{"/bin/true"}})
	c.must(api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: a, Data: "go\n"}, nil)
	c.waitExited(thread, a)
	// a exited last: b, the oldest exited, is gone; d and a remain.
	c.mustFail(errs.NotFound, api.MethodTerminalRead, map[string]any{"threadId": thread, "terminalId": b})
	var list termhost.ListResult
	c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, &list)
	var ids []string
	for _, in := range list.Terminals {
		ids = append(ids, in.TerminalID)
	}
	if strings.Join(ids, ",") != strings.Join([]string{a, d, e}, ",") {
		t.Fatalf("list %v, want %v", ids, []string{a, d, e})
	}
	for _, in := range list.Terminals {
		switch in.TerminalID {
		case a, d:
			if !in.Exited || in.ExitCode == nil || *in.ExitCode != 0 || in.HeadOffset == 0 || in.Command[0] != "/bin/sh" {
				t.Fatalf("exited window %+v", in)
			}
		case e:
			if in.Exited || in.ExitCode != nil {
				t.Fatalf("live terminal %+v", in)
			}
		}
	}
	if got, _ := c.readAll(thread, a, 0, 0, nil); got != "go\r\nA\r\n" {
		t.Fatalf("a's window %q", got)
	}
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: e}, nil)
	// e exits: d is evicted now, never by time.
	c.mustFail(errs.NotFound, api.MethodTerminalRead, map[string]any{"threadId": thread, "terminalId": d})
	c.read(thread, a, 0, 0, nil)
	c.read(thread, e, 0, 0, nil)
}

// TestLiveLimit: the terminal beyond max_live is OVERLOADED; closing one
// makes room. With the default of eight, the ninth is refused.
func TestLiveLimit(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, false)
	var ids []string
	for range 8 {
		ids = append(ids, c.create(thread, "/bin/cat"))
	}
	c.mustFail(errs.Overloaded, api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24, "command": []string{"/bin/cat"}})
	var in termhost.Info
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: ids[0]}, &in)
	if !in.Exited || in.ExitCode == nil {
		t.Fatalf("closed: %+v", in)
	}
	ids = append(ids[1:], c.create(thread, "/bin/cat"))
	c.mustFail(errs.Overloaded, api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24})
	for _, id := range ids {
		c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, nil)
	}
}

// TestResize: the child sees the size it was created with, then the new
// one.
func TestResize(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, false)
	var res termhost.CreateResult
	c.must(api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 100, "rows": 30,
		"command": []string{"/bin/sh", "-c", `stty size; read x; stty size`}}, &res)
	id := res.TerminalID
	c.waitOutput(thread, id, "30 100\r\n")
	size := func() [2]int {
		var list termhost.ListResult
		c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, &list)
		if len(list.Terminals) != 1 {
			t.Fatalf("terminals %+v", list.Terminals)
		}
		return [2]int{list.Terminals[0].Cols, list.Terminals[0].Rows}
	}
	if got := size(); got != [2]int{100, 30} {
		t.Fatalf("size after create %v, want [100 30]", got)
	}
	c.must(api.MethodTerminalResize, termhost.ResizeParams{ThreadID: thread, TerminalID: id, Cols: 132, Rows: 43}, nil)
	if got := size(); got != [2]int{132, 43} {
		t.Fatalf("size after resize %v, want [132 43]", got)
	}
	c.must(api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "\n"}, nil)
	got, _ := c.waitExited(thread, id)
	if got != "30 100\r\n\r\n43 132\r\n" {
		t.Fatalf("output %q", got)
	}
	for _, bad := range [][2]int{{0, 24}, {80, 0}, {1001, 24}, {80, 1001}, {-1, 5}} {
		c.mustFail(errs.InvalidParams, api.MethodTerminalResize, termhost.ResizeParams{ThreadID: thread, TerminalID: id, Cols: bad[0], Rows: bad[1]})
		c.mustFail(errs.InvalidParams, api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": bad[0], "rows": bad[1]})
	}
	// An exited terminal takes no input and no resize.
	c.mustFail(errs.Conflict, api.MethodTerminalResize, termhost.ResizeParams{ThreadID: thread, TerminalID: id, Cols: 80, Rows: 24})
	c.mustFail(errs.Conflict, api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "x"})
}

// TestCloseKillsGroup: close ends the whole process group, even members
// that ignore SIGHUP and SIGTERM (SIGKILL follows).
func TestCloseKillsGroup(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, true)

	id := c.create(thread, "/bin/sh", "-c", `trap '' HUP TERM; sleep 1000 & echo "bg=$!"; wait`)
	out := c.waitOutput(thread, id, "\r\n")
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "bg=")))
	if err != nil || !procAlive(pid) {
		t.Fatalf("background sleep %q: %v", out, err)
	}
	var in termhost.Info
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, &in)
	if !in.Exited || in.ExitCode == nil || *in.ExitCode != 128+9 {
		t.Fatalf("closed: %+v", in)
	}
	testkit.WaitFor(t, 30*time.Second, "the background sleep to die", func() bool { return !procAlive(pid) })
	if e := c.waitExit(id); e.ExitCode != 137 || e.NextOffset != in.HeadOffset {
		t.Fatalf("exit %+v, info %+v", e, in)
	}
	// Closing again changes nothing.
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, &in)

	// A shell that honours SIGHUP ends at once, with its own status.
	id = c.create(thread, "/bin/sh", "-c", `sleep 1000 & echo "bg=$!"; wait`)
	out = c.waitOutput(thread, id, "\r\n")
	pid, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(out, "bg=")))
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, &in)
	if !in.Exited || *in.ExitCode != 128+1 {
		t.Fatalf("closed: %+v", in)
	}
	testkit.WaitFor(t, 30*time.Second, "the background sleep to die", func() bool { return !procAlive(pid) })
}

// TestReattach: a client that disconnects and comes back reads everything
// still retained; the terminal did not depend on the connection.
func TestReattach(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, true)
	id := c.create(thread, "/bin/sh", "-c", `i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); done; read x; echo "bye $x"`)
	before := c.waitOutput(thread, id, "line 199\r\n")
	c.close()

	c2 := dialTermhost(t, env, true)
	var list termhost.ListResult
	c2.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, &list)
	if len(list.Terminals) != 1 || list.Terminals[0].TerminalID != id || list.Terminals[0].Exited {
		t.Fatalf("list %+v", list)
	}
	got, _ := c2.readAll(thread, id, 0, 4096, nil)
	if got != before || int64(len(got)) != list.Terminals[0].HeadOffset {
		t.Fatalf("after reattaching: %d bytes, before %d", len(got), len(before))
	}
	c2.must(api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "now\r"}, nil)
	e := c2.waitExit(id)
	all, last := c2.readAll(thread, id, 0, 0, nil)
	if !strings.HasSuffix(all, "now\r\nbye now\r\n") || e.NextOffset != last.HeadOffset || !last.Exited {
		t.Fatalf("tail %q, exit %+v, last %+v", all[len(all)-40:], e, last)
	}
	// Live notifications continued from where the client attached.
	outs := c2.outputs(id)
	if len(outs) == 0 || outs[len(outs)-1].NextOffset != e.NextOffset || outs[0].Offset < int64(len(before)) {
		t.Fatalf("notifications %+v", outs)
	}
}

// TestRefusals: bad ids, limits, offsets, threads, sizes, commands and an
// untrusted workspace.
func TestRefusals(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, ws := newThread(t, env)
	other, _ := newThread(t, env)
	c := dialTermhost(t, env, false)
	id := c.create(thread, "/bin/sh", "-c", `echo hello; read x`)
	c.waitOutput(thread, id, "hello")

	read := func(p map[string]any) map[string]any {
		q := map[string]any{"threadId": thread, "terminalId": id}
		for k, v := range p {
			q[k] = v
		}
		return q
	}
	for _, p := range []map[string]any{
		{"limit": 4095}, {"limit": 64<<10 + 1}, {"limit": 0}, {"limit": -1},
		{"offset": -1}, {"through": -1}, {"offset": 1 << 40},
		{"offset": "0"}, {"unknown": 1},
	} {
		c.mustFail(errs.InvalidParams, api.MethodTerminalRead, read(p))
	}
	for _, p := range []map[string]any{{"limit": 4096}, {"limit": 64 << 10}, {"offset": 0, "through": 0}} {
		c.must(api.MethodTerminalRead, read(p), nil)
	}
	for _, ref := range []map[string]any{
		{"threadId": thread, "terminalId": "term_"},
		{"threadId": thread, "terminalId": "term_aaaaaaaaaaaaaaaa"},
		{"threadId": thread, "terminalId": strings.ToUpper(id)},
		{"threadId": thread, "terminalId": id[:len(id)-1]},
		{"threadId": other, "terminalId": id},
		{"threadId": "thr_aaaaaaaaaaaaaaaa", "terminalId": id},
		{"threadId": "", "terminalId": id},
	} {
		c.mustFail(errs.NotFound, api.MethodTerminalRead, ref)
		c.mustFail(errs.NotFound, api.MethodTerminalClose, ref)
		c.mustFail(errs.NotFound, api.MethodTerminalInput, map[string]any{"threadId": ref["threadId"], "terminalId": ref["terminalId"], "data": "x"})
		c.mustFail(errs.NotFound, api.MethodTerminalResize, map[string]any{"threadId": ref["threadId"], "terminalId": ref["terminalId"], "cols": 80, "rows": 24})
	}
	var list termhost.ListResult
	c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: other}, &list)
	if len(list.Terminals) != 0 {
		t.Fatalf("another thread lists %+v", list)
	}
	c.mustFail(errs.NotFound, api.MethodTerminalList, termhost.ListParams{ThreadID: "thr_aaaaaaaaaaaaaaaa"})
	c.mustFail(errs.NotFound, api.MethodTerminalList, termhost.ListParams{ThreadID: "nope"})

	create := func(p map[string]any) map[string]any {
		q := map[string]any{"threadId": thread, "cols": 80, "rows": 24}
		for k, v := range p {
			q[k] = v
		}
		return q
	}
	for _, p := range []map[string]any{
		{"command": []string{}}, {"command": []string{""}}, {"command": []string{"/bin/echo", "a\x00b"}},
		{"env": map[string]string{"A=B": "x"}}, {"env": map[string]string{"": "x"}}, {"env": map[string]string{"A": "x\x00"}},
		{"cols": 0}, {"rows": 1001},
	} {
		c.mustFail(errs.InvalidParams, api.MethodTerminalCreate, create(p))
	}
	c.mustFail(errs.NotFound, api.MethodTerminalCreate, create(map[string]any{"command": []string{"no-such-program-here"}}))
	c.mustFail(errs.NotFound, api.MethodTerminalCreate, create(map[string]any{"threadId": "thr_aaaaaaaaaaaaaaaa"}))
	c.mustFail(errs.InvalidParams, api.MethodTerminalInput, map[string]any{"threadId": thread, "terminalId": id, "data": strings.Repeat("x", 64<<10+1)})

	// The environment additions reach the program, the workspace is its
	// folder, and the service's own variables do not leak.
	var res termhost.CreateResult
	c.must(api.MethodTerminalCreate, create(map[string]any{"env": map[string]string{"GREETING": "hi there"},
		"command": []string{"/bin/sh", "-c", `printf '%s|%s|%s|%s' "$GREETING" "$(pwd)" "$TERM" "${LISTEN_FDS-unset}${DEEPCODE_SUPERVISOR_PID-unset}"`}}), &res)
	if got, _ := c.waitExited(thread, res.TerminalID); got != "hi there|"+ws+"|xterm-256color|unsetunset" {
		t.Fatalf("environment %q", got)
	}

	// An untrusted workspace: the thread exists, its workspace lost trust.
	db, err := store.Open(context.Background(), env.Layout("").Database)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(`UPDATE workspaces SET trusted = 0 WHERE path = ?`, ws); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	c.mustFail(errs.WorkspaceUntrusted, api.MethodTerminalCreate, create(nil))
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, nil)
}

// TestLoginShell: without a command the user's shell ($SHELL) runs in the
// workspace.
func TestLoginShell(t *testing.T) {
	t.Parallel()
	env := startInstance(t, "SHELL=/bin/sh")
	thread, ws := newThread(t, env)
	c := dialTermhost(t, env, false)
	id := c.create(thread)
	var list termhost.ListResult
	c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, &list)
	if len(list.Terminals) != 1 || strings.Join(list.Terminals[0].Command, " ") != "/bin/sh" {
		t.Fatalf("list %+v", list)
	}
	c.must(api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "echo \"in:$(pwd)\"; exit 3\n"}, nil)
	got, last := c.waitExited(thread, id)
	if !strings.Contains(got, "in:"+ws+"\r\n") || *last.ExitCode != 3 {
		t.Fatalf("shell output %q, exit %v", got, *last.ExitCode)
	}
}

// TestDrain: while draining, terminals are read, listed and closed, but
// not created, written to or resized; a running terminal is activity the
// drain waits for.
func TestDrain(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	thread, _ := newThread(t, env)
	c := dialTermhost(t, env, false)
	id := c.create(thread, "/bin/sh", "-c", `echo ready; exec cat`)
	c.waitOutput(thread, id, "ready")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := client.Connect(ctx, env.Layout(""), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	drained := make(chan error, 1)
	var res mgmt.PhaseResult
	go func() { drained <- m.Call(ctx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: ptr(90.0)}, &res) }()
	testkit.WaitFor(t, 60*time.Second, "termhost to drain", func() bool { return health(t, env).Draining })
	if a := health(t, env).Activity; a.Terminals != 1 {
		t.Fatalf("activity %+v", a)
	}
	select {
	case err := <-drained:
		t.Fatalf("drain ended with a terminal running: %v", err)
	default:
	}
	c.mustFail(errs.ServiceDraining, api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24})
	c.mustFail(errs.ServiceDraining, api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "x"})
	c.mustFail(errs.ServiceDraining, api.MethodTerminalResize, termhost.ResizeParams{ThreadID: thread, TerminalID: id, Cols: 90, Rows: 30})
	c.read(thread, id, 0, 0, nil)
	c.must(api.MethodTerminalList, termhost.ListParams{ThreadID: thread}, nil)
	c.must(api.MethodTerminalClose, termhost.TerminalRef{ThreadID: thread, TerminalID: id}, nil)
	if err := <-drained; err != nil || res.Phase != mgmt.PhaseDraining || res.Activity.Terminals != 0 {
		t.Fatalf("drain: %v %+v", err, res)
	}
	if err := m.Call(ctx, mgmt.MethodResume, struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, "termhost to resume", func() bool { return !health(t, env).Draining })
	c.create(thread, "/bin/true")
}

type healthBody struct {
	PID      int           `json:"pid"`
	Draining bool          `json:"draining"`
	Activity mgmt.Activity `json:"activity"`
}

// health reads termhost's /health/live over its socket.
func health(t testing.TB, env *testkit.Env) healthBody {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", env.Layout("").Socket(paths.TermhostSocket))
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://localhost/health/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthBody
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestThroughGateway: a native client on gateway.sock creates a terminal
// and receives its output and exit as notifications.
func TestThroughGateway(t *testing.T) {
	t.Parallel()
	env := startInstance(t)
	g := dialGateway(t, env)
	ws := t.TempDir()
	var th struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	g.must(api.MethodThreadStart, map[string]any{"workspace": ws, "trust": true}, &th)
	thread := th.Thread.ID
	var res termhost.CreateResult
	g.must(api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24,
		"command": []string{"/bin/sh", "-c", `read x; echo "got $x"; exit 7`}}, &res)
	id := res.TerminalID
	g.must(api.MethodTerminalInput, termhost.InputParams{ThreadID: thread, TerminalID: id, Data: "ping\n"}, nil)
	e := g.waitExit(id)
	var text strings.Builder
	for _, n := range g.outputs(id) {
		text.WriteString(n.Data)
	}
	if e.ExitCode != 7 || text.String() != "ping\r\ngot ping\r\n" || e.NextOffset != int64(text.Len()) || e.ThreadID != thread {
		t.Fatalf("through the gateway: %q, exit %+v", text.String(), e)
	}
	var page termhost.ReadResult
	g.must(api.MethodTerminalRead, map[string]any{"threadId": thread, "terminalId": id}, &page)
	if page.Data != text.String() || !page.Exited || *page.ExitCode != 7 {
		t.Fatalf("read through the gateway: %+v", page)
	}
	// A second client, subscribed later, gets the next terminal's output
	// too (the gateway holds one subscription to termhost).
	g2 := dialGateway(t, env)
	g.must(api.MethodTerminalCreate, map[string]any{"threadId": thread, "cols": 80, "rows": 24, "command": []string{"/bin/echo", "second"}}, &res)
	e = g2.waitExit(res.TerminalID)
	if outs := g2.outputs(res.TerminalID); len(outs) == 0 || e.NextOffset != outs[len(outs)-1].NextOffset {
		t.Fatalf("second client: %+v %+v", outs, e)
	}
}
