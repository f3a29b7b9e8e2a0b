package cli

import (
	"github.com/deepcode-dev/deepcode/shared/api"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
)

// fakeTerminal is the screen of a terminal, as far as the status line and
// the rendered turn use it: "\r" returns to the line's start, "\n" moves to
// the next line's start (a terminal's output processing), anything else
// overwrites the cell under the cursor.
type fakeTerminal struct {
	lines [][]rune
	row   int
	col   int
	raw   strings.Builder
}

func (ft *fakeTerminal) Write(p []byte) (int, error) {
	ft.raw.Write(p)
	for _, r := range string(p) {
		for len(ft.lines) <= ft.row {
			ft.lines = append(ft.lines, nil)
		}
		switch r {
		case '\r':
			ft.col = 0
		case '\n':
			ft.row++
			ft.col = 0
		default:
			line := ft.lines[ft.row]
			for len(line) <= ft.col {
				line = append(line, ' ')
			}
			line[ft.col] = r
			ft.lines[ft.row] = line
			ft.col++
		}
	}
	return len(p), nil
}

// screen is the screen's text, trailing spaces of each line left out.
func (ft *fakeTerminal) screen() string {
	var b strings.Builder
	for i, l := range ft.lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.TrimRight(string(l), " "))
	}
	return b.String()
}

// cursorLine is the text of the line the cursor is on.
func (ft *fakeTerminal) cursorLine() string {
	if ft.row >= len(ft.lines) {
		return ""
	}
	return strings.TrimRight(string(ft.lines[ft.row]), " ")
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// statusFollower is a follower whose stdout and stderr are one terminal
// with the status line on, and a clock of its own.
func statusFollower(width int) (*follower, *fakeTerminal, *fakeClock) {
	ft := &fakeTerminal{}
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := &app{stdout: ft, stderr: ft}
	f := &follower{a: a, threadID: "thr_t", turnID: "turn_1", interactive: true,
		items: map[string]*itemState{}, pending: map[string]*pendingApproval{}}
	f.status = newStatusLine(ft, clock.now, func() int { return width })
	f.stdoutShared = true
	return f, ft, clock
}

func TestStatusLineFollowsTheTurn(t *testing.T) {
	f, ft, clock := statusFollower(80)
	step := func(d time.Duration, want string) {
		t.Helper()
		clock.t = clock.t.Add(d)
		f.status.draw()
		// The frame changes with each redraw; the rest is the point.
		got := ft.cursorLine()
		if _, rest, ok := strings.Cut(got, " "); !ok || rest != want || !strings.ContainsAny(got[:len(got)-len(rest)], strings.Join(business.SpinnerFrames, "")) {
			t.Fatalf("status line %q, want a spinner frame then %q\nscreen:\n%s", got, want, ft.screen())
		}
	}
	feed(f, [2]string{api.EventTurnQueued, `{"turn":{"id":"turn_1"}}`})
	step(0, "0s queued")
	feed(f,
		[2]string{api.EventItemCompleted, item("item_u", "userMessage", "completed", `{"text":"task"}`)},
		[2]string{api.EventTurnStarted, `{"turnId":"turn_1"}`})
	step(time.Second, "1s working")
	feed(f, [2]string{api.EventItemStarted, item("item_c", "commandExecution", "inProgress", `{"command":["/bin/sh","-c","ls  -la\nmore"],"cwd":"/w"}`)})
	step(2*time.Second, "3s running: ls -la …")
	// Output erases the line; it comes back below the output.
	feed(f, [2]string{api.EventItemDelta, delta("item_c", `{"stream":"stdout","text":"a.txt\n"}`)})
	if got, above := ft.cursorLine(), strings.TrimRight(string(ft.lines[ft.row-1]), " "); got != "" || above != "a.txt" {
		t.Fatalf("the status line was not erased before the output: %q, then %q", above, got)
	}
	step(0, "3s running: ls -la …")
	feed(f, [2]string{api.EventItemCompleted, item("item_c", "commandExecution", "completed", `{"command":["/bin/sh","-c","ls"],"exitCode":0}`)})
	step(57*time.Second, "1m00s working")

	// A message streaming in the middle of a line: the line stays off.
	feed(f,
		[2]string{api.EventItemStarted, item("item_a", "agentMessage", "inProgress", `{}`)},
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"hello "}`)})
	clock.t = clock.t.Add(time.Second)
	f.status.draw()
	if got := ft.cursorLine(); got != "hello" {
		t.Fatalf("drawn in the middle of a message: %q", got)
	}
	feed(f,
		[2]string{api.EventItemDelta, delta("item_a", `{"text":"world"}`)},
		[2]string{api.EventItemCompleted, item("item_a", "agentMessage", "completed", `{"text":"hello world"}`)})
	step(0, "1m01s working")

	// A file change: the step while it runs, then the change's line.
	feed(f, [2]string{api.EventItemStarted, item("item_f", "fileChange", "inProgress", `{"path":"a.txt","action":"write"}`)})
	step(0, "1m01s writing a.txt")
	feed(f, [2]string{api.EventItemCompleted, item("item_f", "fileChange", "completed", `{"path":"a.txt","action":"write","before":"1\n2\n","after":"1\nb\n3\n"}`)})
	step(0, "1m01s working")

	// An approval: asked on the terminal, with the line off until the answer.
	feed(f, [2]string{api.EventApprovalRequest, `{"approval":{"id":"appr_1","turnId":"turn_1","revision":1,"status":"pending","kind":"script","summary":"rm it"}}`})
	step(0, "1m01s waiting for approval")
	f.stdinEOF = true // answered at once: denied
	f.ask(f.pending["appr_1"])
	f.forget("appr_1")
	f.restep()
	step(time.Hour, "1h01m working")

	// The end erases the line for good.
	feed(f, [2]string{api.EventTurnCompleted, `{"turn":{"id":"turn_1","status":"completed"}}`})
	f.status.draw()
	want := strings.Join([]string{
		"a.txt",
		"hello world",
		"~ a.txt (+2 −1)",
		"deepcode: approval requested (script): rm it",
		"approve? [y/N] (no answer: denied)",
		"",
	}, "\n")
	if got := ft.screen(); got != want {
		t.Fatalf("screen:\n%s\nwant:\n%s\nwritten: %q", got, want, ft.raw.String())
	}
	if !f.finished || f.outcome != nil {
		t.Fatalf("finished %v, outcome %v", f.finished, f.outcome)
	}
}

func TestStatusLineFitsTheWidth(t *testing.T) {
	f, ft, _ := statusFollower(24)
	feed(f, [2]string{api.EventItemStarted, item("item_c", "commandExecution", "inProgress", `{"command":["make","-j","test","TESTFLAGS=-race"]}`)})
	f.status.draw()
	got := ft.cursorLine()
	if n := len([]rune(got)); n != 23 || !strings.HasSuffix(got, "…") || !strings.Contains(got, "0s running: make") {
		t.Fatalf("status line %q (%d columns), want 23 ending in …", got, n)
	}
	// A shorter step leaves nothing of the longer one.
	feed(f, [2]string{api.EventItemCompleted, item("item_c", "commandExecution", "completed", `{}`)})
	f.status.draw()
	if got := ft.cursorLine(); !strings.HasSuffix(got, " 0s working") || len([]rune(got)) != len([]rune("⠋ 0s working")) {
		t.Fatalf("status line %q", got)
	}
	// Escape sequences of a command line are not written to the terminal.
	feed(f, [2]string{api.EventItemStarted, item("item_d", "commandExecution", "inProgress", `{"command":"printf '\u001b[2J'"}`)})
	f.status.draw()
	if strings.Contains(ft.raw.String(), "\x1b") {
		t.Fatalf("an escape sequence reached the terminal: %q", ft.raw.String())
	}
}

// Without a status line (stderr not a terminal, --json) nothing but the
// output is written.
func TestNoStatusLine(t *testing.T) {
	f, out, errb := testFollower(false)
	feed(f,
		[2]string{api.EventItemStarted, item("item_c", "commandExecution", "inProgress", `{"command":["ls"]}`)},
		[2]string{api.EventItemDelta, delta("item_c", `{"stream":"stdout","text":"x\n"}`)},
		[2]string{api.EventItemCompleted, item("item_c", "commandExecution", "completed", `{}`)},
	)
	f.status.draw() // nil: nothing
	if out.String() != "x\n" || errb.Len() != 0 {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
}

func TestElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 999 * time.Millisecond: "0s", 59 * time.Second: "59s", time.Minute: "1m00s",
		65 * time.Second: "1m05s", time.Hour + 2*time.Minute + 3*time.Second: "1h02m",
	} {
		if got := business.Elapsed(d); got != want {
			t.Errorf("elapsed(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestFileChangeLines(t *testing.T) {
	for _, c := range []struct {
		name, status, payload, want string
	}{
		{"edit", "completed", `{"path":"a.txt","action":"write","before":"1\n2\n3\n","after":"1\nx\n3\n4\n5\n"}`, "~ a.txt (+3 −1)"},
		{"new file by write", "completed", `{"path":"a.txt","action":"write","after":"1\n2\n3\n"}`, "+ a.txt (+3)"},
		{"append", "completed", `{"path":"log","action":"append","before":"a\n","after":"a\nb\n"}`, "~ log (+1 −0)"},
		{"too large to tell", "completed", `{"path":"big","action":"write","truncated":true}`, "~ big"},
		{"failed", "failed", `{"path":"a.txt","action":"write"}`, "! a.txt (write failed)"},
		{"native add with a diff", "completed", `{"tool":"write_file","path":"n.go","action":"add","diff":"--- /dev/null\n+++ b/n.go\n@@ -0,0 +1,2 @@\n+package n\n+\n"}`, "+ n.go (+2)"},
		{"native update with a diff", "completed", `{"path":"n.go","action":"update","diff":"--- a/n.go\n+++ b/n.go\n@@ -1,2 +1,2 @@\n package n\n--- x\n+++ y\n"}`, "~ n.go (+1 −1)"},
		{"native diff truncated", "completed", `{"path":"n.go","action":"update","diff":"--- a/n.go\n+++ b/n.go\n@@ -1 +1 @@\n-a\n","diffTruncated":true}`, "~ n.go"},
		{"delete", "completed", `{"path":"gone.txt","action":"delete"}`, "- gone.txt"},
		{"changes", "completed", `{"changes":[{"path":"a","action":"add"},{"path":"b","action":"delete"},{"path":"c","action":"update"}]}`, "+ a\n- b\n~ c"},
		{"not a payload", "completed", `[]`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Join(fileChangeLines(c.status, []byte(c.payload)), "\n"); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}
