package termhost

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/testkit/wine"
)

// Terminals on Windows: a pseudo console per terminal, its output in the
// same byte-offset window as on Unix, input, resize, exit codes, and close
// ending the program. Under Wine, see windows/README.md for how far its
// pseudo console goes.
func TestConPTYTerminals(t *testing.T) {
	pub := newPublisher()
	pub.sink = func([]byte) {}
	go pub.run()
	reg := newRegistry(slog.New(slog.DiscardHandler), 8, 8, nil, pub)
	defer reg.close(nil)
	dir := t.TempDir()
	env := terminalEnv(os.Environ(), dir, nil)
	const thread = "thr_aaaaaaaaaaaaaaaa"
	cmdExe := loginShell()
	start := func(argv ...string) *terminal {
		t.Helper()
		term, err := reg.create(spec{threadID: thread, argv: argv, command: argv, dir: dir, env: env, cols: 80, rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		return term
	}
	ended := func(term *terminal) ReadResult {
		t.Helper()
		select {
		case <-term.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("terminal %v did not exit", term.command)
		}
		res, err := term.read(0, 1<<20, -1)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// waitOutput waits until the window holds want, reading it by offsets.
	waitOutput := func(term *terminal, want string) string {
		t.Helper()
		var got strings.Builder
		off := int64(0)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			res, err := term.read(off, 4096, -1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != off && !res.Truncated {
				t.Fatalf("read from %d answered offset %d", off, res.Offset)
			}
			got.WriteString(res.Data)
			off = res.NextOffset
			if strings.Contains(got.String(), want) {
				return got.String()
			}
			if res.Exited && !res.HasMore {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("output %q, want it to contain %q", got.String(), want)
		return ""
	}

	t.Run("exit codes and close", func(t *testing.T) {
		natural := start(cmdExe, "/d", "/c", "exit 7")
		if res := ended(natural); res.ExitCode == nil || *res.ExitCode != 7 {
			t.Fatalf("natural exit: %+v", res)
		}
		if err := natural.resize(100, 30); !errs.Is(err, errs.Conflict) {
			t.Fatalf("resize after exit: %v, want CONFLICT", err)
		}
		// Close ends a program that would run on (an interactive shell).
		waiting := start(cmdExe, "/d", "/q")
		waiting.terminate()
		if res := ended(waiting); res.ExitCode == nil {
			t.Fatalf("closed terminal: %+v", res)
		}
	})

	t.Run("output, input and resize through the console", func(t *testing.T) {
		wine.Skip(t, wine.PseudoConsoleUnwired)
		natural := start(cmdExe, "/d", "/c", "echo natural-output& exit 7")
		res := ended(natural)
		if !strings.Contains(res.Data, "natural-output") || res.ExitCode == nil || *res.ExitCode != 7 {
			t.Fatalf("natural exit: %+v", res)
		}
		if res.HeadOffset != int64(len(res.Data)) || res.Offset != 0 || res.NextOffset != res.HeadOffset {
			t.Fatalf("offsets of the whole window: %+v", res)
		}
		shell := start(cmdExe, "/d", "/q")
		if err := shell.resize(120, 40); err != nil {
			t.Fatalf("resize: %v", err)
		}
		if err := shell.input("echo typed-input\r\n"); err != nil {
			t.Fatal(err)
		}
		waitOutput(shell, "typed-input")
		if err := shell.input("exit 3\r\n"); err != nil {
			t.Fatal(err)
		}
		if res := ended(shell); res.ExitCode == nil || *res.ExitCode != 3 {
			t.Fatalf("exit 3: %+v", res)
		}
	})
}
