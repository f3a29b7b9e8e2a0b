package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Limits of the search tools.
const (
	maxListed      = 1000
	maxMatches     = 500
	maxGrepFile    = 4 << 20
	maxMatchLine   = 300
	maxSearchBytes = 128 << 10
)

type findArgs struct {
	Path       string `json:"path,omitempty"`
	Pattern    string `json:"pattern,omitempty"`
	Glob       string `json:"glob,omitempty"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`

	abs string
	re  *regexp.Regexp
}

func prepareFind(tc *toolCtx) error {
	if err := decodeArgs(tc.args, &tc.find); err != nil {
		return err
	}
	a := &tc.find
	abs, err := tc.resolve(a.Path)
	if err != nil {
		return err
	}
	a.abs = abs
	tc.payload.Path = tc.rel(abs)
	switch tc.payload.Tool {
	case "glob":
		if a.Pattern == "" {
			return errors.New("pattern is required")
		}
		if !doublestar.ValidatePattern(a.Pattern) {
			return fmt.Errorf("%q is not a valid glob pattern", a.Pattern)
		}
	case "grep":
		if a.Pattern == "" {
			return errors.New("pattern is required")
		}
		expr := a.Pattern
		if a.IgnoreCase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return fmt.Errorf("%q is not a valid regular expression: %v", a.Pattern, err)
		}
		a.re = re
		if a.Glob != "" && !doublestar.ValidatePattern(a.Glob) {
			return fmt.Errorf("%q is not a valid glob pattern", a.Glob)
		}
	}
	return nil
}

func runList(_ context.Context, tc *toolCtx) toolResult {
	ents, err := os.ReadDir(tc.find.abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return failed("%s does not exist", tc.payload.Path)
		}
		return failed("cannot list %s: %v", tc.payload.Path, unwrapPath(err))
	}
	var b strings.Builder
	for i, e := range ents {
		if i == maxListed {
			fmt.Fprintf(&b, "[… %d more entries]\n", len(ents)-maxListed)
			break
		}
		name := e.Name()
		if e.IsDir() {
			name += "/"
		} else if e.Type()&fs.ModeSymlink != 0 {
			name += "@"
		}
		b.WriteString(name)
		b.WriteByte('\n')
	}
	if len(ents) == 0 {
		b.WriteString("(empty folder)\n")
	}
	return toolResult{text: b.String()}
}

func runGlob(ctx context.Context, tc *toolCtx) toolResult {
	var found []string
	more := false
	err := doublestar.GlobWalk(os.DirFS(tc.find.abs), tc.find.Pattern, func(path string, d fs.DirEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(found) == maxListed {
			more = true
			return doublestar.SkipDir
		}
		if d.IsDir() {
			path += "/"
		}
		found = append(found, path)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return failed("cannot search %s: %v", tc.payload.Path, unwrapPath(err))
	}
	slices.Sort(found)
	out := strings.Join(found, "\n")
	if len(found) == 0 {
		out = "(no match)"
	}
	if more {
		out += fmt.Sprintf("\n[… more than %d matches: narrow the pattern]", maxListed)
	}
	return toolResult{text: out + "\n"}
}

func runGrep(ctx context.Context, tc *toolCtx) toolResult {
	a := tc.find
	var b strings.Builder
	matches := 0
	errTooMany := errors.New("too many")
	search := func(path string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() > maxGrepFile || !st.Mode().IsRegular() {
			return nil
		}
		r := bufio.NewReader(f)
		if head, _ := r.Peek(binaryPreview); bytes.IndexByte(head, 0) >= 0 {
			return nil
		}
		rel := tc.rel(path)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxGrepFile)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if !a.re.MatchString(line) {
				continue
			}
			if len(line) > maxMatchLine {
				line = validUTF8Prefix(line[:maxMatchLine]) + "…"
			}
			fmt.Fprintf(&b, "%s:%d: %s\n", rel, n, line)
			matches++
			if matches == maxMatches || b.Len() > maxSearchBytes {
				return errTooMany
			}
		}
		return nil
	}
	st, err := os.Stat(a.abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return failed("%s does not exist", tc.payload.Path)
		}
		return failed("cannot search %s: %v", tc.payload.Path, unwrapPath(err))
	}
	if !st.IsDir() {
		err = search(a.abs)
	} else {
		err = filepath.WalkDir(a.abs, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: skipped
			}
			if d.IsDir() {
				if path != a.abs && (d.Name() == ".git" || d.Name() == "node_modules") {
					return filepath.SkipDir
				}
				return nil
			}
			if a.Glob != "" {
				rel, _ := filepath.Rel(a.abs, path)
				if ok, _ := doublestar.Match(a.Glob, filepath.ToSlash(rel)); !ok {
					return nil
				}
			}
			return search(path)
		})
	}
	if errors.Is(err, errTooMany) {
		fmt.Fprintf(&b, "[… stopped after %d matches: narrow the pattern or the path]\n", matches)
	} else if err != nil && ctx.Err() == nil {
		return failed("cannot search %s: %v", tc.payload.Path, err)
	}
	if matches == 0 {
		return toolResult{text: "(no match)\n"}
	}
	return toolResult{text: b.String()}
}
