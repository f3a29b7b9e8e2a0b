package native

import (
	"fmt"
	"strconv"
	"strings"
)

// hunk is one @@ section of a unified diff.
type hunk struct {
	header   string
	oldStart int // 1-based line of the old file
	old      []string
	new      []string
	// noNewlineOld/New: the side's last line has no line break.
	noNewlineOld, noNewlineNew bool
}

// parsePatch reads the hunks of a unified diff of one file; the ---/+++
// and other header lines before the first hunk are skipped.
func parsePatch(patch string) ([]hunk, bool, error) {
	lines := strings.Split(strings.ReplaceAll(patch, "\r\n", "\n"), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	var hs []hunk
	fromNull := false
	var cur *hunk
	last := byte(0)
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "@@"):
			h, err := parseHunkHeader(l)
			if err != nil {
				return nil, false, fmt.Errorf("line %d: %v", i+1, err)
			}
			hs = append(hs, h)
			cur = &hs[len(hs)-1]
			last = 0
		case cur == nil:
			if strings.HasPrefix(l, "--- ") && strings.TrimSpace(strings.TrimPrefix(l, "--- ")) == "/dev/null" {
				fromNull = true
			}
		case strings.HasPrefix(l, `\`): // "\ No newline at end of file"
			switch last {
			case '-':
				cur.noNewlineOld = true
			case '+':
				cur.noNewlineNew = true
			case ' ':
				cur.noNewlineOld, cur.noNewlineNew = true, true
			}
		case strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "+++ ") || strings.HasPrefix(l, "diff "):
			// The next file's header: only one file per patch.
			return nil, false, fmt.Errorf("line %d: the patch changes more than one file; give one file's changes per call", i+1)
		case l == "" || l[0] == ' ':
			text := ""
			if l != "" {
				text = l[1:]
			}
			cur.old = append(cur.old, text)
			cur.new = append(cur.new, text)
			last = ' '
		case l[0] == '-':
			cur.old = append(cur.old, l[1:])
			last = '-'
		case l[0] == '+':
			cur.new = append(cur.new, l[1:])
			last = '+'
		default:
			return nil, false, fmt.Errorf("line %d: %q is not a diff line (each line of a hunk starts with a space, - or +)", i+1, l)
		}
	}
	if len(hs) == 0 {
		return nil, false, fmt.Errorf("no hunk: a unified diff has @@ -line,count +line,count @@ sections")
	}
	return hs, fromNull, nil
}

func parseHunkHeader(l string) (hunk, error) {
	h := hunk{header: l}
	f := strings.Fields(l)
	if len(f) < 3 || f[0] != "@@" || !strings.HasPrefix(f[1], "-") || !strings.HasPrefix(f[2], "+") {
		return h, fmt.Errorf("%q is not a hunk header (@@ -line,count +line,count @@)", l)
	}
	start, _, _ := strings.Cut(f[1][1:], ",")
	n, err := strconv.Atoi(start)
	if err != nil || n < 0 {
		return h, fmt.Errorf("%q is not a hunk header (@@ -line,count +line,count @@)", l)
	}
	h.oldStart = n
	return h, nil
}

// applyPatch applies a unified diff to content. Each hunk's old lines must
// match the file exactly; a hunk is looked for at its line number first,
// then anywhere after the previous hunk. It returns the new content and
// the number of hunks applied.
func applyPatch(content []byte, existed bool, patch string) ([]byte, int, error) {
	hs, fromNull, err := parsePatch(patch)
	if err != nil {
		return nil, 0, err
	}
	if fromNull && existed && len(content) > 0 {
		return nil, 0, fmt.Errorf("the patch creates the file (--- /dev/null), but it exists already")
	}
	if !existed && !fromNull {
		for _, h := range hs {
			if len(h.old) > 0 {
				return nil, 0, fmt.Errorf("the file does not exist")
			}
		}
	}
	text := string(content)
	endsNL := text == "" || strings.HasSuffix(text, "\n")
	lines := strings.Split(text, "\n")
	if endsNL {
		lines = lines[:len(lines)-1]
	}
	var out []string
	pos := 0 // next line of lines not yet copied
	for i, h := range hs {
		at := findHunk(lines, h, pos)
		if at < 0 {
			return nil, 0, hunkMismatch(lines, h, i+1, pos)
		}
		out = append(out, lines[pos:at]...)
		out = append(out, h.new...)
		pos = at + len(h.old)
		if pos == len(lines) {
			if h.noNewlineNew {
				endsNL = false
			} else if len(h.new) > 0 || h.noNewlineOld {
				endsNL = true
			}
		}
	}
	out = append(out, lines[pos:]...)
	res := strings.Join(out, "\n")
	if endsNL && len(out) > 0 {
		res += "\n"
	}
	return []byte(res), len(hs), nil
}

// findHunk is where h's old lines are in lines (at or after from), -1 if
// nowhere: at the hunk's own line number if they are there.
func findHunk(lines []string, h hunk, from int) int {
	matches := func(at int) bool {
		if at < from || at+len(h.old) > len(lines) {
			return false
		}
		for j, l := range h.old {
			if lines[at+j] != l {
				return false
			}
		}
		return true
	}
	want := h.oldStart - 1
	if len(h.old) == 0 {
		// A pure insertion: at its line (0 for a new file).
		return max(min(h.oldStart, len(lines)), from)
	}
	if matches(want) {
		return want
	}
	for at := from; at+len(h.old) <= len(lines); at++ {
		if matches(at) {
			return at
		}
	}
	return -1
}

// hunkMismatch says why hunk n does not apply: the first of its old lines
// that differs from the file at the hunk's position.
func hunkMismatch(lines []string, h hunk, n, from int) error {
	at := max(h.oldStart-1, from)
	for j, l := range h.old {
		if at+j >= len(lines) {
			return fmt.Errorf("hunk %d (%s) does not apply: the file has %d lines, the hunk expects line %d: %q", n, h.header, len(lines), at+j+1, l)
		}
		if lines[at+j] != l {
			return fmt.Errorf("hunk %d (%s) does not apply: line %d is %q, the hunk expects %q (and its lines are nowhere else after the previous hunk); read the file again and make the patch from what it holds", n, h.header, at+j+1, lines[at+j], l)
		}
	}
	return fmt.Errorf("hunk %d (%s) does not apply after the previous hunk", n, h.header)
}
