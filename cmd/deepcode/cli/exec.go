package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/cobra"
)

// maxTaskBytes bounds a task read from stdin (agentd's own limit is 256 KiB;
// reading one byte more lets it say so).
const maxTaskBytes = 256<<10 + 1

type execOptions struct {
	detach    bool
	trust     bool
	workspace string
	profile   string
}

func (a *app) execCommand() *cobra.Command {
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec [flags] TASK...",
		Short: "Run one task in the background service and follow it to its end",
		Long: `Run one task as a turn of a new thread in the background service (started if
needed) and follow it to its end.

The task's words are joined with spaces; "-" alone reads the task from stdin.
The default profile is "deepcode", agentd's own agent, once a model is
configured for it ([profiles.deepcode] model, base_url and api in
config.toml; see docs/PROVIDERS.md), else "shell", which runs the task as a
/bin/sh command line (a cmd.exe one on Windows); --profile selects another
configured profile (e.g. "script").

In the foreground the output is rendered from the durable event log: agent
messages and command stdout go to stdout, command stderr to stderr, and file
changes to stderr as changes, one line per file:

  ~ a.txt (+3 −1)   an edit: lines added and removed
  + b.txt (+12)     a new file
  - c.txt           a deletion
  ! d.txt (write failed)

(the counts are left out when the agent does not report the file's text). A
lost connection is re-established and rendering continues where it stopped:
nothing is lost or printed twice. Approval requests are asked on the terminal
("approve? [y/N]"); when stdin is not a terminal they are denied. While the
turn runs and stderr is a terminal, one status line there shows a spinner,
the elapsed time and the current step ("running: ls -la", "writing a.txt",
"waiting for approval"); it is redrawn in place and erased at the end (not
with --json, not when stderr is not a terminal or TERM=dumb).

Exit status: 0 when the turn completed; the command's own exit status when a
command failed with one; 1 for other failures; 130 after Ctrl-C (which
interrupts the turn) or when the turn was interrupted; 143 when terminated
(SIGTERM detaches: the turn goes on).

--detach prints the thread and turn ids ({"threadId","turnId"} with --json)
and returns at once; the turn goes on in the service. With --json in the
foreground nothing is streamed and one JSON object is printed at the end:

  {"threadId": "thr_…", "turnId": "turn_…",
   "status": "completed" | "failed" | "interrupted",
   "response": "the turn's final response text (\"\" when none)",
   "items": [ the turn's items in the order they began, each as turn/read
              answers it: {"id","threadId","turnId","kind","status",
              "payload","createdAt","updatedAt"} ],
   "usage": the tokenUsage item's payload ({"inputTokens","outputTokens",
            "totalTokens",…}) or null when the runtime reported none,
   "error": {"code","message","retryable"} only when it did not complete}

A workspace is refused until it is trusted: --trust grants it (recorded once,
so later runs need no flag).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			fromStdin := len(args) == 1 && args[0] == "-"
			task, err := taskText(args, os.Stdin)
			if err != nil {
				return err
			}
			interactive := !fromStdin && isTerminal(os.Stdin.Fd())
			return a.execRun(cmd.Context(), o, task, sigs, interactive)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.detach, "detach", false, "start the turn and return at once with its thread and turn ids")
	f.BoolVar(&o.trust, "trust", false, "trust the workspace (an explicit grant, recorded once)")
	f.StringVar(&o.workspace, "workspace", "", "the workspace folder (default: the current directory)")
	f.StringVar(&o.profile, "profile", "", `the agent profile (default: "deepcode" once [profiles.deepcode] names a model, else "shell")`)
	f.BoolVar(&a.jsonOut, "json", false, "print one JSON value (ids with --detach, the outcome otherwise)")
	return cmd
}

// taskText joins the arguments, or reads stdin for "-".
func taskText(args []string, stdin io.Reader) (string, error) {
	if len(args) == 1 && args[0] == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, maxTaskBytes))
		if err != nil {
			return "", errs.Wrap(err, errs.InvalidParams, "cannot read the task from stdin")
		}
		if !utf8.Valid(b) {
			return "", errs.New(errs.InvalidParams, "the task on stdin is not UTF-8 text")
		}
		return string(b), nil
	}
	return strings.Join(args, " "), nil
}

// pendingSignal returns a signal received so far, if any.
func pendingSignal(sigs <-chan os.Signal) os.Signal {
	select {
	case s := <-sigs:
		return s
	default:
		return nil
	}
}

func (a *app) execRun(ctx context.Context, o execOptions, task string, sigs <-chan os.Signal, interactive bool) error {
	ws, err := workspacePath(o.workspace)
	if err != nil {
		return err
	}
	if err := a.ensureRunning(ctx); err != nil {
		if pendingSignal(sigs) != nil || ctx.Err() != nil {
			return &exitError{code: exitInterrupted}
		}
		return err
	}
	// From here on nothing is abandoned half-way by a signal: the calls
	// complete (bounded), and the signal is acted on once the turn exists.
	base := context.WithoutCancel(ctx)
	b, err := a.dialBusiness(base)
	if err != nil {
		return err
	}
	if s := pendingSignal(sigs); s != nil {
		b.Close()
		return &exitError{code: exitInterrupted}
	}
	thread, err := business.StartThread(base, b, ws, task, o.profile, o.trust)
	if err != nil {
		b.Close()
		return err
	}
	f := &follower{
		a: a, ctx: base, sigs: sigs, interactive: interactive, json: a.jsonOut,
		threadID: thread.ID, items: map[string]*itemState{}, pending: map[string]*pendingApproval{},
	}
	f.b = b
	defer f.close()
	turn, err := f.startTurn(business.NewMessageID(), task)
	if err != nil {
		return err
	}
	f.turnID = turn.ID
	if o.detach {
		if a.jsonOut {
			a.printJSON(map[string]string{"threadId": f.threadID, "turnId": f.turnID})
		} else {
			fmt.Fprintf(a.stdout, "thread %s\nturn %s\n", f.threadID, f.turnID)
		}
		return nil
	}
	if !a.jsonOut && a.stderr == os.Stderr && isTerminal(os.Stderr.Fd()) && os.Getenv("TERM") != "dumb" {
		stop := f.startStatus(a.stderr, isTerminal(os.Stdout.Fd()), func() int {
			cols, _, _ := windowSize(os.Stderr.Fd())
			return cols
		})
		defer stop()
	}
	return f.run()
}

// startTurn submits the task. turn/start is keyed by messageId: after a
// lost answer the identical request is sent again with the same key, which
// returns the turn the first one admitted instead of starting another.
func (f *follower) startTurn(messageID, task string) (business.Turn, error) {
	var res struct {
		Turn business.Turn `json:"turn"`
	}
	params := map[string]any{"threadId": f.threadID, "messageId": messageID, "input": map[string]string{"text": task}}
	delay, since := business.MinReconnectDelay, time.Now()
	for {
		var err error
		if f.b == nil {
			err = f.dial()
		}
		if err == nil {
			if err = call(f.ctx, f.b, api.MethodTurnStart, params, &res); err == nil {
				return res.Turn, nil
			}
		}
		if !business.Retryable(err) || time.Since(since) > reconnectLimit {
			return business.Turn{}, err
		}
		f.lost(err)
		f.pause(delay)
		if f.finished {
			return business.Turn{}, f.outcome
		}
		delay = min(delay*2, business.ReconnectMaxDelay)
	}
}
