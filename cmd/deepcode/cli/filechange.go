package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/textdiff"
)

// changeSign is the mark of a file change's action: "+" for a new file,
// "-" for a deletion, "~" for an edit; "" when the action alone does not
// tell (the script provider's "write" and "append" create a file or
// change one).
func changeSign(action string) string {
	switch strings.ToLower(action) {
	case "add", "added", "create", "created", "new":
		return "+"
	case "delete", "deleted", "remove", "removed":
		return "-"
	case "write", "append", "":
		return ""
	}
	return "~"
}

// fileChangePayload is what the providers' fileChange items carry: one
// file (path, action, optional before/after text or a unified diff), or a
// list of changes without text.
type fileChangePayload struct {
	Path          string  `json:"path"`
	Action        string  `json:"action"`
	Before        *string `json:"before"`
	After         *string `json:"after"`
	Truncated     bool    `json:"truncated"`
	Diff          string  `json:"diff"`
	DiffTruncated bool    `json:"diffTruncated"`
	Changes       []struct {
		Path   string `json:"path"`
		Action string `json:"action"`
	} `json:"changes"`
}

// fileChangeLines renders a completed fileChange item as changes, one line
// per file: "~ a.txt (+3 −1)" for an edit, "+ a.txt (+3)" for a new file,
// "- a.txt" for a deletion, "! a.txt (write failed)" for a change that
// failed. The counts are left out when the item does not carry the text.
func fileChangeLines(status string, payload json.RawMessage) []string {
	var p fileChangePayload
	if json.Unmarshal(payload, &p) != nil {
		return nil
	}
	if p.Path == "" {
		var out []string
		for _, c := range p.Changes {
			if c.Path == "" {
				continue
			}
			sign := changeSign(c.Action)
			if sign == "" {
				sign = "~"
			}
			out = append(out, changeLine(status, c.Path, c.Action, sign, -1, -1))
		}
		return out
	}
	sign := changeSign(p.Action)
	added, removed := -1, -1
	switch {
	case p.Diff != "" && !p.DiffTruncated:
		added, removed = countUnified(p.Diff)
	case p.After != nil && !p.Truncated:
		before := ""
		if p.Before != nil {
			before = *p.Before
		}
		added, removed = textdiff.Count([]byte(before), []byte(*p.After))
	}
	if sign == "" {
		// "write" with the text: a new file has no before.
		sign = "~"
		if p.After != nil && p.Before == nil && !p.Truncated {
			sign = "+"
		}
	}
	return []string{changeLine(status, p.Path, p.Action, sign, added, removed)}
}

func changeLine(status, path, action, sign string, added, removed int) string {
	if status != "completed" {
		if action == "" {
			action = "change"
		}
		return fmt.Sprintf("! %s (%s failed)", path, action)
	}
	switch {
	case sign == "-" || added < 0:
		return sign + " " + path
	case sign == "+":
		return fmt.Sprintf("+ %s (+%d)", path, added)
	}
	return fmt.Sprintf("~ %s (+%d −%d)", path, added, removed)
}

// countUnified counts the added and removed lines of a unified diff: the
// "+" and "-" lines of its hunks, not the "---"/"+++" header.
func countUnified(d string) (added, removed int) {
	inHunk := false
	for _, l := range strings.Split(d, "\n") {
		switch {
		case strings.HasPrefix(l, "@@"):
			inHunk = true
		case !inHunk:
		case strings.HasPrefix(l, "+"):
			added++
		case strings.HasPrefix(l, "-"):
			removed++
		}
	}
	return added, removed
}
