// Package exec is the "exec" provider: a turn runs the profile's command
// line in the workspace, its output one command execution item.
package exec

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/services/agentd/runtime"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// execGrace is how long a cancelled command may take to exit after SIGTERM
// before its process group is killed.
var execGrace = 5 * time.Second

// Provider runs the profile's command line in the workspace. An
// argument "{prompt}" is replaced by the prompt; without one the prompt is
// written to the command's stdin.
type Provider struct{}

func (Provider) CanSteer() bool { return false }

func (Provider) Run(ctx context.Context, t *runtime.TurnRun) error {
	defer runtime.LockThreadForChild()()
	argv, stdin := commandLine(t.Profile.Command, t.Prompt)
	if len(argv) == 0 {
		return errs.New(errs.InvalidParams, "profile %q has no command", t.ProfileName)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = t.Workspace
	cmd.Env = os.Environ()
	for k, v := range t.Profile.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if stdin {
		cmd.Stdin = strings.NewReader(t.Prompt)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return errs.Wrap(err, errs.Internal, "cannot run the command")
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return errs.Wrap(err, errs.Internal, "cannot run the command")
	}
	item := t.Sink.StartItem(api.KindCommandExecution, runtime.CommandPayload{Command: argv, Cwd: t.Workspace})
	if err := runtime.StartInGroup(cmd); err != nil {
		t.Sink.CompleteItem(item, api.ItemFailed, runtime.CommandPayload{Command: argv, Cwd: t.Workspace})
		// The OS error is the internal cause: logged, not in the payload.
		return errs.Wrap(err, errs.ProviderUnavailable, "cannot start %s: %s", argv[0], runtime.StartProblem(err))
	}
	out := runtime.NewTailBuffer(runtime.OutputTail)
	var wg sync.WaitGroup
	for stream, r := range map[string]io.Reader{"stdout": stdout, "stderr": stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pump(r, func(text string) {
				out.Add(text)
				t.Sink.Delta(item, runtime.OutputDelta{Stream: stream, Text: text})
			})
		}()
	}
	waited := make(chan error, 1)
	go func() {
		wg.Wait() // the pipes are read to EOF before Wait closes them
		waited <- cmd.Wait()
	}()
	var waitErr error
	cancelled := false
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		cancelled = true
		runtime.TerminateGroup(cmd.Process.Pid, false)
		select {
		case waitErr = <-waited:
		case <-time.After(execGrace):
			runtime.TerminateGroup(cmd.Process.Pid, true)
			waitErr = <-waited
		}
	}
	code := cmd.ProcessState.ExitCode()
	final := runtime.CommandPayload{Command: argv, Cwd: t.Workspace, ExitCode: &code, Output: out.String(), OutputBytes: out.Total()}
	if tail := strings.TrimSpace(out.String()); tail != "" {
		t.Sink.Response(runtime.LastRunes(tail, 4096))
	}
	if cancelled {
		t.Sink.CompleteItem(item, api.ItemFailed, final)
		return ctx.Err()
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			t.Sink.CompleteItem(item, api.ItemFailed, final)
			return errs.Wrap(waitErr, errs.ProviderUnavailable, "the command could not be waited for")
		}
		t.Sink.CompleteItem(item, api.ItemFailed, final)
		return errs.New(errs.TaskFailed, "%s exited with %s", argv[0], ee.ProcessState.String()).With("exitCode", code)
	}
	t.Sink.CompleteItem(item, api.ItemCompleted, final)
	return nil
}

// commandLine substitutes the prompt; stdin reports that it goes to stdin.
func commandLine(template []string, prompt string) (argv []string, stdin bool) {
	stdin = true
	for _, a := range template {
		if a == "{prompt}" {
			a, stdin = prompt, false
		}
		argv = append(argv, a)
	}
	return argv, stdin
}

// pump reads r and calls emit with valid UTF-8 text, never splitting a
// character across two calls.
func pump(r io.Reader, emit func(string)) {
	buf := make([]byte, 32<<10)
	var carry []byte
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := append(carry, buf[:n]...)
			cut := validPrefix(data)
			if cut > 0 {
				emit(strings.ToValidUTF8(string(data[:cut]), "\uFFFD"))
			}
			carry = append(carry[:0], data[cut:]...)
		}
		if err != nil {
			if len(carry) > 0 {
				emit(strings.ToValidUTF8(string(carry), "\uFFFD"))
			}
			return
		}
	}
}

// validPrefix is the length of data without a trailing incomplete rune.
func validPrefix(data []byte) int {
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				return i
			}
			break
		}
	}
	return len(data)
}
