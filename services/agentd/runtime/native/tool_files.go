package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/textdiff"
)

// Limits of the file tools.
const (
	maxReadBytes  = 256 << 10 // of what read_file returns
	maxReadLines  = 2000      // lines read_file returns without a limit
	maxEditBytes  = 16 << 20  // a file the file tools change
	maxDiffBytes  = 256 << 10 // the diff kept in a file change's payload
	maxBlobFile   = 1 << 20   // before/after kept as blobs up to this size
	binaryPreview = 8 << 10
)

type fileArgs struct {
	Path       string  `json:"path"`
	Offset     int     `json:"offset,omitempty"`
	Limit      int     `json:"limit,omitempty"`
	Content    *string `json:"content,omitempty"`
	OldString  *string `json:"old_string,omitempty"`
	NewString  *string `json:"new_string,omitempty"`
	ReplaceAll bool    `json:"replace_all,omitempty"`
	Patch      string  `json:"patch,omitempty"`

	abs string
}

// fileChange is what write_file or edit does to a file.
type fileChange struct {
	existed bool
	before  []byte
	after   []byte
	mode    fs.FileMode
	summary string // what the model is told it did
}

func prepareFile(tc *toolCtx) error {
	if err := decodeArgs(tc.args, &tc.file); err != nil {
		return err
	}
	if tc.file.Path == "" {
		return errors.New("path is required")
	}
	abs, err := tc.resolve(tc.file.Path)
	if err != nil {
		return err
	}
	tc.file.abs = abs
	tc.payload.Path = tc.rel(abs)
	return nil
}

func runReadFile(_ context.Context, tc *toolCtx) toolResult {
	a := tc.file
	st, err := os.Stat(a.abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return failed("%s does not exist", tc.payload.Path)
	case err != nil:
		return failed("cannot read %s: %v", tc.payload.Path, unwrapPath(err))
	case st.IsDir():
		return failed("%s is a folder: use list to see it", tc.payload.Path)
	}
	b, err := os.ReadFile(a.abs)
	if err != nil {
		return failed("cannot read %s: %v", tc.payload.Path, unwrapPath(err))
	}
	if bytes.IndexByte(b[:min(len(b), binaryPreview)], 0) >= 0 {
		return failed("%s is a binary file (%d bytes): not shown", tc.payload.Path, len(b))
	}
	text := string(b)
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	first := max(a.Offset, 1)
	limit := a.Limit
	if limit <= 0 {
		limit = maxReadLines
	}
	if first > len(lines) && len(lines) > 0 {
		return failed("%s has %d lines: offset %d is past its end", tc.payload.Path, len(lines), a.Offset)
	}
	var out strings.Builder
	last := min(len(lines), first-1+limit)
	for i := first - 1; i < last; i++ {
		line := strings.TrimRight(lines[i], "\n")
		if out.Len()+len(line) > maxReadBytes {
			fmt.Fprintf(&out, "[… shortened: read on from line %d with offset]\n", i+1)
			last = i
			break
		}
		fmt.Fprintf(&out, "%6d\t%s\n", i+1, line)
	}
	if last < len(lines) && !strings.HasSuffix(out.String(), "with offset]\n") {
		fmt.Fprintf(&out, "[… %d more lines: read on with offset %d]\n", len(lines)-last, last+1)
	}
	if len(lines) == 0 {
		out.WriteString("(empty file)\n")
	}
	return toolResult{text: out.String()}
}

func prepareWrite(tc *toolCtx) error {
	if err := prepareFile(tc); err != nil {
		return err
	}
	if tc.file.Content == nil {
		return errors.New("content is required")
	}
	ch, err := planWrite(tc)
	if err != nil {
		return err
	}
	tc.change = ch
	tc.payload.Action = map[bool]string{true: "update", false: "add"}[ch.existed]
	tc.payload.Diff, tc.payload.DiffTruncated = tc.diff(ch)
	return nil
}

func prepareEdit(tc *toolCtx) error {
	if err := prepareFile(tc); err != nil {
		return err
	}
	a := tc.file
	switch {
	case a.Patch != "" && (a.OldString != nil || a.NewString != nil):
		return errors.New("give either patch or old_string and new_string, not both")
	case a.Patch == "" && (a.OldString == nil || a.NewString == nil):
		return errors.New("give old_string and new_string (or a patch)")
	case a.Patch == "" && *a.OldString == "":
		return errors.New("old_string is empty: to create a file use write_file")
	case a.Patch == "" && *a.OldString == *a.NewString:
		return errors.New("old_string and new_string are the same: nothing would change")
	}
	ch, err := planEdit(tc)
	if err != nil {
		return err
	}
	tc.change = ch
	tc.payload.Action = map[bool]string{true: "update", false: "add"}[ch.existed]
	tc.payload.Diff, tc.payload.DiffTruncated = tc.diff(ch)
	return nil
}

// readForChange reads the file a change starts from.
func readForChange(tc *toolCtx) (*fileChange, error) {
	ch := &fileChange{mode: 0o644}
	st, err := os.Stat(tc.file.abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ch, nil
	case err != nil:
		return nil, fmt.Errorf("cannot read %s: %v", tc.payload.Path, unwrapPath(err))
	case st.IsDir():
		return nil, fmt.Errorf("%s is a folder", tc.payload.Path)
	case st.Size() > maxEditBytes:
		return nil, fmt.Errorf("%s is %d bytes: the file tools change files of at most %d bytes", tc.payload.Path, st.Size(), maxEditBytes)
	}
	b, err := os.ReadFile(tc.file.abs)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %v", tc.payload.Path, unwrapPath(err))
	}
	ch.existed, ch.before, ch.mode = true, b, st.Mode().Perm()
	return ch, nil
}

func planWrite(tc *toolCtx) (*fileChange, error) {
	ch, err := readForChange(tc)
	if err != nil {
		return nil, err
	}
	ch.after = []byte(*tc.file.Content)
	verb := "created"
	if ch.existed {
		verb = "replaced"
	}
	ch.summary = fmt.Sprintf("%s %s (%d bytes)", verb, tc.payload.Path, len(ch.after))
	return ch, nil
}

func planEdit(tc *toolCtx) (*fileChange, error) {
	ch, err := readForChange(tc)
	if err != nil {
		return nil, err
	}
	a := tc.file
	if a.Patch != "" {
		after, hunks, err := applyPatch(ch.before, ch.existed, a.Patch)
		if err != nil {
			return nil, fmt.Errorf("the patch does not apply to %s: %v", tc.payload.Path, err)
		}
		ch.after = after
		ch.summary = fmt.Sprintf("applied %d hunks to %s", hunks, tc.payload.Path)
		return ch, nil
	}
	if !ch.existed {
		return nil, fmt.Errorf("%s does not exist: to create it use write_file", tc.payload.Path)
	}
	text, old := string(ch.before), *a.OldString
	n := strings.Count(text, old)
	switch {
	case n == 0:
		return nil, fmt.Errorf("old_string does not occur in %s: read the file and give its exact text (spaces and line breaks included)", tc.payload.Path)
	case n > 1 && !a.ReplaceAll:
		return nil, fmt.Errorf("old_string occurs %d times in %s: give more of the text around it to make it unique, or set replace_all", n, tc.payload.Path)
	}
	ch.after = []byte(strings.ReplaceAll(text, old, *a.NewString))
	ch.summary = fmt.Sprintf("replaced %d occurrence(s) in %s", n, tc.payload.Path)
	return ch, nil
}

// diff is the change as a unified diff, within maxDiffBytes.
func (tc *toolCtx) diff(ch *fileChange) (string, bool) {
	from := "a/" + tc.payload.Path
	if !ch.existed {
		from = "/dev/null"
	}
	d := string(textdiff.Unified(from, ch.before, "b/"+tc.payload.Path, ch.after))
	if len(d) > maxDiffBytes {
		return validUTF8Prefix(d[:maxDiffBytes]), true
	}
	return d, false
}

// runFileChange applies a write_file or edit call: the change is planned
// again from the file as it is now (it may have changed since the
// proposal) and written atomically.
func runFileChange(_ context.Context, tc *toolCtx) toolResult {
	var ch *fileChange
	var err error
	if tc.payload.Tool == "write_file" {
		ch, err = planWrite(tc)
	} else {
		ch, err = planEdit(tc)
	}
	if err != nil {
		return failed("%v", err)
	}
	tc.payload.Diff, tc.payload.DiffTruncated = tc.diff(ch)
	tc.payload.Action = map[bool]string{true: "update", false: "add"}[ch.existed]
	if err := writeAtomic(tc.file.abs, ch.after, ch.mode); err != nil {
		return failed("cannot write %s: %v", tc.payload.Path, unwrapPath(err))
	}
	tc.payload.Bytes = len(ch.after)
	if len(ch.before) <= maxBlobFile && len(ch.after) <= maxBlobFile {
		if ch.existed {
			tc.h.SaveBlob(tc.itemID, BlobBefore, ch.before)
		}
		tc.h.SaveBlob(tc.itemID, BlobAfter, ch.after)
	}
	return toolResult{text: ch.summary}
}

// writeAtomic replaces path with data: a temporary file in its folder,
// synced, renamed over it.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".deepcode-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// unwrapPath is the OS error without the path (the item names it).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
