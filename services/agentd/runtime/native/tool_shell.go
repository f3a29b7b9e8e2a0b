package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits of the shell tool's output.
const (
	maxBlobOutput   = 8 << 20  // kept whole in the item's blob
	maxStreamed     = 1 << 20  // streamed as item.delta events
	maxPayloadTail  = 64 << 10 // kept in the item's payload
	maxResultOutput = 16 << 10 // given to the model
	// shellGrace is how long a stopped command may take to exit after
	// SIGTERM before its process group is killed.
	shellGrace = 2 * time.Second
)

type shellArgs struct {
	Command        json.RawMessage `json:"command"`
	Workdir        string          `json:"workdir,omitempty"`
	TimeoutSeconds int             `json:"timeout_seconds,omitempty"`

	argv []string
	cwd  string
}

func prepareShell(tc *toolCtx) error {
	a := &tc.shell
	if err := decodeArgs(tc.args, a); err != nil {
		return err
	}
	// A command line, or (as some models send) an argument vector.
	var line string
	var argv []string
	switch {
	case json.Unmarshal(a.Command, &line) == nil && strings.TrimSpace(line) != "":
		a.argv = append(append([]string(nil), shellArgv...), line)
		tc.payload.Command = []string{line}
	case json.Unmarshal(a.Command, &argv) == nil && len(argv) > 0 && argv[0] != "":
		a.argv = argv
		tc.payload.Command = argv
	default:
		return errors.New("command is required: the command line to run")
	}
	cwd, err := tc.resolve(a.Workdir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return fmt.Errorf("the folder %s does not exist", tc.rel(cwd))
	}
	if a.TimeoutSeconds < 0 {
		return errors.New("timeout_seconds must be positive")
	}
	a.cwd = cwd
	tc.payload.Cwd = cwd
	return nil
}

func (tc *toolCtx) toolTimeout() time.Duration {
	d := tc.t.Profile.ToolTimeout
	if d <= 0 {
		d = defaultToolTimeout
	}
	if s := tc.shell.TimeoutSeconds; s > 0 && time.Duration(s)*time.Second < d {
		d = time.Duration(s) * time.Second
	}
	return d
}

func runShell(ctx context.Context, tc *toolCtx) toolResult {
	argv := tc.shell.argv
	tmp := tc.t.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	if tc.t.Profile.Sandbox == "workspace-write" {
		var note string
		argv, note = sandboxArgv(tc.t.Workspace, tmp, tc.t.Profile.Network, argv)
		tc.payload.Sandbox = note
	}
	argv = groupArgv(argv)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = tc.shell.cwd
	cmd.Env = append(append([]string(nil), tc.t.ToolEnv...), "TMPDIR="+tmp)
	if tc.t.ToolEnv == nil {
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	}
	out := &output{h: tc.h, item: tc.itemID}
	cmd.Stdout = out.stream("stdout")
	cmd.Stderr = out.stream("stderr")
	// A background process that keeps the output pipes open does not hold
	// the call: its group is killed once the command exited.
	cmd.WaitDelay = time.Second
	timeout := tc.toolTimeout()

	unlock := lockThread()
	defer unlock()
	if err := startInGroup(cmd); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return failed("cannot run %s: it does not exist", argv[0])
		}
		return failed("cannot run the command: %v", err)
	}
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stop := func() {
		terminateGroup(pid, false)
		select {
		case <-done:
		case <-time.After(shellGrace):
			terminateGroup(pid, true)
			_ = cmd.Process.Kill()
			<-done
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := false
	select {
	case <-done:
	case <-ctx.Done():
		stop()
	case <-timer.C:
		timedOut = true
		stop()
	}
	terminateGroup(pid, true) // whatever it left running in its group
	out.close()

	code := cmd.ProcessState.ExitCode()
	p := tc.payload
	p.ExitCode = &code
	p.Output, p.OutputBytes = out.tailString(), out.total
	if out.total > 0 {
		p.Blob = BlobOutput
		tc.h.SaveBlob(tc.itemID, BlobOutput, out.whole())
	}
	shown := out.forModel()
	if shown == "" {
		shown = "(no output)"
	}
	note := ""
	if strings.HasPrefix(p.Sandbox, "none") {
		note = "\n(" + p.Sandbox + ")"
	}
	switch {
	case ctx.Err() != nil:
		return toolResult{text: "interrupted by the user; the command was stopped. Output so far:\n" + shown, failed: true, err: "interrupted"}
	case timedOut:
		r := failed("the command timed out after %s and was stopped", timeout)
		r.text += ". Output so far:\n" + shown + note
		return r
	case code != 0:
		return toolResult{text: fmt.Sprintf("exit code %d\n%s%s", code, shown, note), failed: true, err: fmt.Sprintf("exit code %d", code)}
	}
	return toolResult{text: "exit code 0\n" + shown + note}
}

// output collects a command's output: streamed as deltas (up to
// maxStreamed), kept whole (up to maxBlobOutput), its tail kept for the
// payload.
type output struct {
	h    Host
	item string

	mu       sync.Mutex
	whole_   bytes.Buffer
	tail     []byte
	total    int64
	streamed int64
	capped   bool
	writers  []*streamWriter
}

type streamWriter struct {
	o      *output
	stream string
	carry  []byte
}

func (o *output) stream(name string) *streamWriter {
	w := &streamWriter{o: o, stream: name}
	o.writers = append(o.writers, w)
	return w
}

func (w *streamWriter) Write(b []byte) (int, error) {
	data := append(w.carry, b...)
	cut := len(data)
	// Never split a character between two deltas.
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				cut = i
			}
			break
		}
	}
	w.o.add(w.stream, data[:cut])
	w.carry = append(w.carry[:0], data[cut:]...)
	return len(b), nil
}

func (o *output) add(stream string, b []byte) {
	if len(b) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.total += int64(len(b))
	if room := maxBlobOutput - o.whole_.Len(); room > 0 {
		o.whole_.Write(b[:min(len(b), room)])
	}
	o.tail = append(o.tail, b...)
	if over := len(o.tail) - maxPayloadTail; over > 0 {
		o.tail = append(o.tail[:0:0], o.tail[over:]...)
	}
	switch {
	case o.streamed < maxStreamed:
		text := strings.ToValidUTF8(string(b), "\uFFFD")
		o.streamed += int64(len(text))
		o.h.Delta(o.item, OutputDelta{Stream: stream, Text: text})
	case !o.capped:
		o.capped = true
		o.h.Delta(o.item, OutputDelta{Stream: "stderr", Text: "\n[deepcode: output goes on beyond what is streamed; the item's blob keeps it whole]\n"})
	}
}

// close flushes what the writers held back.
func (o *output) close() {
	for _, w := range o.writers {
		if len(w.carry) > 0 {
			o.add(w.stream, w.carry)
			w.carry = nil
		}
	}
}

func (o *output) whole() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.whole_.Bytes())
}

func (o *output) tailString() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.ToValidUTF8(validUTF8Suffix(string(o.tail)), "\uFFFD")
}

// forModel is the output as the model gets it: head and tail within
// maxResultOutput.
func (o *output) forModel() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.total <= int64(o.whole_.Len()) {
		return strings.ToValidUTF8(capText(o.whole_.String(), maxResultOutput), "\uFFFD")
	}
	head := validUTF8Prefix(string(o.whole_.Bytes()[:maxResultOutput/4]))
	tail := validUTF8Suffix(string(o.tail[max(0, len(o.tail)-3*maxResultOutput/4):]))
	return strings.ToValidUTF8(fmt.Sprintf("%s\n[… %d bytes left out …]\n%s", head, o.total-int64(len(head)+len(tail)), tail), "\uFFFD")
}
