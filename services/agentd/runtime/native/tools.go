package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// A tool's kind of item and how it is approved.
type toolDef struct {
	spec toolSpec
	kind string // item kind
	// readOnly tools need no approval unless the profile names them in
	// tool_approval.
	readOnly bool
	// prepare checks the arguments and fills the proposal's payload.
	prepare func(tc *toolCtx) error
	// run runs the call and says what the model is told.
	run func(ctx context.Context, tc *toolCtx) toolResult
}

// toolResult is a call's outcome.
type toolResult struct {
	text   string // what the model is told
	failed bool
	err    string // why it failed (for the item)
}

func failed(format string, a ...any) toolResult {
	msg := fmt.Sprintf(format, a...)
	return toolResult{text: "error: " + msg, failed: true, err: msg}
}

// toolCtx is one call being handled.
type toolCtx struct {
	t       *Turn
	h       Host
	itemID  string
	args    json.RawMessage
	payload *ToolPayload
	// parsed arguments and what prepare computed, per tool
	shell shellArgs
	file  fileArgs
	find  findArgs
	// plan of a file change, computed at proposal time for the approval
	// (and computed again when the call runs)
	change *fileChange
}

func obj(props map[string]any, required ...string) map[string]any {
	m := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

func str(desc string) map[string]any  { return map[string]any{"type": "string", "description": desc} }
func num(desc string) map[string]any  { return map[string]any{"type": "integer", "description": desc} }
func flag(desc string) map[string]any { return map[string]any{"type": "boolean", "description": desc} }

// tools are the runtime's tools by name.
var tools = map[string]*toolDef{
	"shell": {
		spec: toolSpec{Name: "shell", Description: "Run a shell command (/bin/sh -c) in the workspace and return its exit code and output (stdout and stderr, interleaved; long output is shortened).",
			Parameters: obj(map[string]any{
				"command":         str("the command line"),
				"workdir":         str("the folder to run it in, relative to the workspace (default: the workspace)"),
				"timeout_seconds": num("how long it may run (default and most: the profile's tool timeout)"),
			}, "command")},
		kind: KindCommandExecution, prepare: prepareShell, run: runShell,
	},
	"read_file": {
		spec: toolSpec{Name: "read_file", Description: "Read a text file of the workspace. Lines are numbered from 1; offset and limit select lines.",
			Parameters: obj(map[string]any{
				"path":   str("the file, relative to the workspace"),
				"offset": num("the first line to read, from 1"),
				"limit":  num("how many lines to read"),
			}, "path")},
		kind: KindToolCall, readOnly: true, prepare: prepareFile, run: runReadFile,
	},
	"write_file": {
		spec: toolSpec{Name: "write_file", Description: "Create a file, or replace a file's whole content, in the workspace (folders are created as needed).",
			Parameters: obj(map[string]any{
				"path":    str("the file, relative to the workspace"),
				"content": str("the file's new content"),
			}, "path", "content")},
		kind: KindFileChange, prepare: prepareWrite, run: runFileChange,
	},
	"edit": {
		spec: toolSpec{Name: "edit", Description: "Change a file of the workspace: replace old_string (which must occur exactly once, unless replace_all) with new_string, or apply a unified diff (patch) to it.",
			Parameters: obj(map[string]any{
				"path":        str("the file, relative to the workspace"),
				"old_string":  str("the exact text to replace"),
				"new_string":  str("the text to put in its place"),
				"replace_all": flag("replace every occurrence of old_string"),
				"patch":       str("instead of old_string/new_string: a unified diff of the file (@@ hunks with context lines)"),
			}, "path")},
		kind: KindFileChange, prepare: prepareEdit, run: runFileChange,
	},
	"list": {
		spec: toolSpec{Name: "list", Description: "List a folder of the workspace (folders end with /).",
			Parameters: obj(map[string]any{"path": str("the folder, relative to the workspace (default: the workspace)")})},
		kind: KindToolCall, readOnly: true, prepare: prepareFind, run: runList,
	},
	"glob": {
		spec: toolSpec{Name: "glob", Description: "Find files whose path matches a glob pattern (** matches any folders, e.g. **/*.go).",
			Parameters: obj(map[string]any{
				"pattern": str("the pattern, relative to path"),
				"path":    str("the folder to search, relative to the workspace (default: the workspace)"),
			}, "pattern")},
		kind: KindToolCall, readOnly: true, prepare: prepareFind, run: runGlob,
	},
	"grep": {
		spec: toolSpec{Name: "grep", Description: "Search the workspace's text files for a regular expression (RE2 syntax); prints path:line: text for each match.",
			Parameters: obj(map[string]any{
				"pattern":     str("the regular expression"),
				"path":        str("the folder or file to search, relative to the workspace (default: the workspace)"),
				"glob":        str("only files whose path matches this glob pattern, e.g. **/*.go"),
				"ignore_case": flag("match without regard to case"),
			}, "pattern")},
		kind: KindToolCall, readOnly: true, prepare: prepareFind, run: runGrep,
	},
}

// toolOrder is the order tools are offered in.
var toolOrder = []string{"shell", "read_file", "write_file", "edit", "list", "glob", "grep"}

func toolSpecs() []toolSpec {
	out := make([]toolSpec, 0, len(toolOrder))
	for _, n := range toolOrder {
		out = append(out, tools[n].spec)
	}
	return out
}

// policyFor is the approval policy of a tool: the profile's tool_approval
// entry, else "none" for read-only tools and approval_policy for the others.
func policyFor(t *Turn, name string) string {
	if p := t.Profile.ToolApproval[name]; p != "" {
		return p
	}
	if def := tools[name]; def != nil && def.readOnly {
		return "none"
	}
	if t.Profile.ApprovalPolicy == "" {
		return "ask"
	}
	return t.Profile.ApprovalPolicy
}

// errOutside is a path the profile does not let the tools use.
type pathError struct{ msg string }

func (e *pathError) Error() string { return e.msg }

// resolve is a tool's path argument as an absolute path: relative paths
// are in the workspace, and paths outside it (also through a symbolic
// link) are refused unless the profile allows them.
func (tc *toolCtx) resolve(p string) (string, error) {
	ws := tc.t.Workspace
	if p == "" || p == "." {
		return ws, nil
	}
	if strings.ContainsRune(p, 0) {
		return "", &pathError{"the path contains a NUL byte"}
	}
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(ws, p)
	}
	abs = filepath.Clean(abs)
	if tc.t.Profile.OutsideWorkspace {
		return abs, nil
	}
	outside := &pathError{fmt.Sprintf("%s is outside the workspace %s: this profile lets tools use only the workspace (set outside_workspace = true to allow more)", p, ws)}
	if !within(ws, abs) {
		return "", outside
	}
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		realWS = ws
	}
	if real := evalExisting(abs); !within(realWS, real) {
		outside.msg = fmt.Sprintf("%s leads outside the workspace %s through a symbolic link: this profile lets tools use only the workspace", p, ws)
		return "", outside
	}
	return abs, nil
}

// within reports whether path is root or inside it (both clean, absolute).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// evalExisting resolves the symbolic links of the longest existing prefix
// of path and appends the rest.
func evalExisting(path string) string {
	rest := ""
	for p := path; ; {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// rel is path relative to the workspace where it is inside it.
func (tc *toolCtx) rel(path string) string {
	if r, err := filepath.Rel(tc.t.Workspace, path); err == nil && within(tc.t.Workspace, path) {
		return filepath.ToSlash(r)
	}
	return path
}

// decodeArgs reads a call's JSON arguments into v, strictly.
func decodeArgs(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("the arguments are not valid JSON: %v", err)
		}
		return fmt.Errorf("the arguments do not fit the tool: %v", err)
	}
	return nil
}

// capText shortens s for the model: its head and tail, max bytes in all.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return headTail(s, max/4, max-max/4)
}

func validUTF8Prefix(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func validUTF8Suffix(s string) string {
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}
