package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/charmbracelet/x/ansi"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
)

// statusInterval is how often the status line is redrawn.
const statusInterval = 100 * time.Millisecond

// statusLine is the one line a running turn shows on a terminal's stderr:
// a spinner, the time since the turn was started and its current step
// ("running: ls -la", "writing a.txt", "waiting for approval"). It is
// redrawn in place, erased before anything else is written to the
// terminal, left off while the cursor is in the middle of a line (an agent
// message still streaming) or a question waits for an answer, and erased
// at the end. A nil *statusLine does nothing.
type statusLine struct {
	w     io.Writer // the terminal
	now   func() time.Time
	width func() int // the terminal's columns, 0 when unknown
	start time.Time
	step  string

	frame   int
	shown   int  // the columns the line on the screen takes, 0 when none
	midLine bool // the last output did not end a line
	paused  bool // a question is asked on the terminal
	stopped bool
}

func newStatusLine(w io.Writer, now func() time.Time, width func() int) *statusLine {
	return &statusLine{w: w, now: now, width: width, start: now(), step: "starting"}
}

// setStep names what the turn does now.
func (s *statusLine) setStep(step string) {
	if s == nil {
		return
	}
	s.step = step
}

// draw redraws the line, unless it must stay off.
func (s *statusLine) draw() {
	if s == nil || s.stopped || s.paused || s.midLine {
		return
	}
	line := business.SpinnerFrames[s.frame%len(business.SpinnerFrames)] + " " + business.Elapsed(s.now().Sub(s.start)) + " " + s.step
	s.frame++
	// One column short of the width: a full line would wrap on some
	// terminals, and a wrapped line cannot be erased in place.
	limit := 79
	if s.width != nil {
		if w := s.width(); w > 0 {
			limit = w - 1
		}
	}
	line = ansi.Truncate(line, limit, "…")
	n := ansi.StringWidth(line)
	if n < s.shown {
		s.clear()
	}
	_, _ = io.WriteString(s.w, "\r"+line)
	s.shown = n
}

// clear erases the line from the screen. Spaces, not an escape sequence:
// every terminal and console understands them.
func (s *statusLine) clear() {
	if s == nil || s.shown == 0 {
		return
	}
	_, _ = io.WriteString(s.w, "\r"+strings.Repeat(" ", s.shown)+"\r")
	s.shown = 0
}

// wrote records output written to the terminal: the line stays off while
// the cursor is in the middle of a line.
func (s *statusLine) wrote(p []byte) {
	if s == nil || len(p) == 0 {
		return
	}
	s.midLine = p[len(p)-1] != '\n'
}

// pause erases the line and keeps it off until resume: a question waits
// on the terminal.
func (s *statusLine) pause() {
	if s == nil {
		return
	}
	s.clear()
	s.paused = true
}

// resume follows an answer typed on the terminal: its Enter ended the line.
func (s *statusLine) resume() {
	if s == nil {
		return
	}
	s.paused, s.midLine = false, false
}

// stop erases the line for good.
func (s *statusLine) stop() {
	if s == nil {
		return
	}
	s.clear()
	s.stopped = true
}

// statusWriter is a stream sharing the terminal with the status line: the
// line is erased before each write.
type statusWriter struct {
	s *statusLine
	w io.Writer
}

func (sw statusWriter) Write(p []byte) (int, error) {
	sw.s.clear()
	n, err := sw.w.Write(p)
	sw.s.wrote(p[:n])
	return n, err
}

// oneLine is text fit for the status line: its first line, runs of spaces
// and tabs collapsed, control characters (escape sequences of a command
// line) left out.
func oneLine(s string) string {
	first, _, more := strings.Cut(strings.TrimSpace(s), "\n")
	first = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\t' {
			return -1
		}
		return r
	}, first)
	first = strings.Join(strings.Fields(first), " ")
	if more {
		first += " …"
	}
	return first
}

// stepOf is the status line's words for an item that started, "" for an
// item that is not a step of its own (the user's input, token usage).
func stepOf(kind string, payload json.RawMessage) string {
	var p struct {
		Command json.RawMessage `json:"command"`
		Path    string          `json:"path"`
		Action  string          `json:"action"`
		Changes []struct {
			Path   string `json:"path"`
			Action string `json:"action"`
		} `json:"changes"`
		Tool string `json:"tool"`
	}
	_ = json.Unmarshal(payload, &p)
	switch kind {
	case "agentMessage":
		return "responding"
	case "reasoning":
		return "thinking"
	case "commandExecution":
		if c := commandText(p.Command); c != "" {
			return "running: " + oneLine(c)
		}
		return "running a command"
	case "fileChange":
		path, action := p.Path, p.Action
		if path == "" && len(p.Changes) > 0 {
			path, action = p.Changes[0].Path, p.Changes[0].Action
			if len(p.Changes) > 1 {
				path = fmt.Sprintf("%s and %d more", path, len(p.Changes)-1)
			}
		}
		verb := "writing"
		switch changeSign(action) {
		case "-":
			verb = "deleting"
		case "+":
			verb = "creating"
		}
		if path == "" {
			return verb + " files"
		}
		return verb + " " + path
	case "toolCall":
		if p.Tool != "" {
			return "calling " + p.Tool
		}
		return "calling a tool"
	case "userMessage", "tokenUsage", "contextTrimmed":
		return ""
	}
	return "working"
}

// commandText is a command payload as a command line: an argument vector
// joined, the script of "sh -c SCRIPT" (or "cmd /c SCRIPT") alone.
func commandText(raw json.RawMessage) string {
	var argv []string
	if json.Unmarshal(raw, &argv) != nil {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	if len(argv) == 3 && (argv[1] == "-c" || strings.EqualFold(argv[1], "/c")) {
		return argv[2]
	}
	return strings.Join(argv, " ")
}
