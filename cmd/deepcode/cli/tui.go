package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/cobra"
)

type tuiOptions struct {
	trust     bool
	workspace string
	profile   string
	ids       bool // show the instance's and the thread's ids in the status line
}

const tuiLong = `The terminal UI: threads of the background service (started if needed) and
their live output, attached through the same authenticated connection as the
CLI.

The left pane lists the threads; the right one shows the selected thread,
rebuilt from its durable event log with one contiguous cursor, so a lost
connection or /reconnect loses nothing and shows nothing twice. The status
line shows the connection, the service's phase (running, draining) and the
selected thread's state: idle, working (with a spinner and the time the turn
has run), waiting for your approval, and how many turns are queued; --ids
adds the instance's and the thread's ids. The agent's messages are rendered
as Markdown, wrapped to the terminal's width; prompts and command output are
shown as they are. (The TUI is deepcode-tui, run with these arguments from
beside deepcode or from $DEEPCODE_LIBEXEC; without it, deepcode tui fails
with TUI_UNAVAILABLE.)

Keys: enter sends the prompt (a new thread's first turn, a new turn of an
idle thread, or steering for its running turn); ctrl+j inserts a newline;
tab switches between the prompt and the thread list (up/down, enter to
open, n for a new thread); esc interrupts the selected thread's running
turn; y / n answer a pending approval when the prompt is empty; pgup/pgdown
scroll; ctrl+t opens the terminal pane, a shell in the selected thread's
workspace that takes the window (ctrl+] returns here, the shell goes on;
ctrl+t again continues where it was, nothing shown twice); ctrl+c quits.
Quitting detaches: turns and terminals go on in the service.

Commands: /new, /queue TEXT (queue a turn behind the running one),
/steer TEXT, /interrupt, /approve, /deny, /reconnect, /quit.

--trust grants trust to the workspace of new threads (recorded once),
--workspace selects it (default: the current directory), --profile their
agent profile. stdin and stdout must be a terminal: scripts use
"deepcode exec" or "deepcode relay". NO_COLOR turns colours off; COLORFGBG
with a light background (such as 0;15) selects the light Markdown style.`

func tuiFlags(cmd *cobra.Command, o *tuiOptions) {
	f := cmd.Flags()
	f.BoolVar(&o.trust, "trust", false, "trust the workspace of new threads (an explicit grant, recorded once)")
	f.StringVar(&o.workspace, "workspace", "", "the workspace of new threads (default: the current directory)")
	f.StringVar(&o.profile, "profile", "", `the agent profile of new threads (default: "deepcode" once [profiles.deepcode] names a model, else "shell")`)
	f.BoolVar(&o.ids, "ids", false, "show the instance's and the thread's ids in the status line")
}

func (a *app) tuiCommand() *cobra.Command {
	var o tuiOptions
	cmd := &cobra.Command{
		Use:   "tui [flags]",
		Short: "The terminal UI (also: deepcode with no command, on a terminal)",
		Long:  tuiLong,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.runTUI(cmd, o) },
	}
	tuiFlags(cmd, &o)
	return cmd
}

// tuiRoot makes `deepcode` with no command run the TUI when stdin and
// stdout are a terminal; elsewhere it prints the help, as before (or, with
// TUI flags, refuses like `deepcode tui`).
func (a *app) tuiRoot(root *cobra.Command) {
	var o tuiOptions
	tuiFlags(root, &o)
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		set := cmd.Flags().Changed("trust") || cmd.Flags().Changed("workspace") || cmd.Flags().Changed("profile")
		if !set && !stdioTerminal() {
			return cmd.Help()
		}
		return a.runTUI(cmd, o)
	}
}

func stdioTerminal() bool { return isTerminal(os.Stdin.Fd()) && isTerminal(os.Stdout.Fd()) }

func (a *app) runTUI(cmd *cobra.Command, o tuiOptions) error {
	if !stdioTerminal() {
		return &exitError{code: exitUsage, err: errs.New(errs.UsageError,
			"the terminal UI needs a terminal on stdin and stdout; from scripts use `deepcode exec` or `deepcode relay`")}
	}
	if a.tui.Run == nil {
		return a.runTUIBinary()
	}
	if err := a.setup(cmd, nil); err != nil {
		return err
	}
	ws, err := workspacePath(o.workspace)
	if err != nil {
		return err
	}
	a.quiet = true // progress messages would scribble over the screen
	if err := a.tui.Run(cmd.Context(), &TUIHost{a: a}, TUIArgs{Trust: o.trust, Workspace: ws, Profile: o.profile, IDs: o.ids}); err != nil {
		return err
	}
	fmt.Fprintln(a.stderr, "deepcode: detached; turns go on in the service")
	return nil
}

// tuiBinaryName is the TUI's own binary, which links the terminal
// packages that deepcode does not (see TUIOptions).
const tuiBinaryName = "deepcode-tui"

// runTUIBinary runs deepcode-tui with this command line, found where the
// service binaries are looked for (libexecCandidates). On Unix it takes
// this process's place (syscall.Exec) and returns only if it could not;
// on Windows, which has no exec, it runs as a child on the same console
// and its exit status is this one's. Without it, TUI_UNAVAILABLE: deepcode
// has no TUI of its own.
func (a *app) runTUIBinary() error {
	invoked, err := invokedExecutable()
	if err != nil {
		invoked = ""
	}
	var self os.FileInfo
	if exe, err := os.Executable(); err == nil {
		self, _ = os.Stat(exe)
	}
	dirs := libexecCandidates(invoked)
	for _, d := range dirs {
		p, err := filepath.Abs(filepath.Join(d, tuiBinaryName+exeSuffix))
		if err != nil {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if self != nil && os.SameFile(fi, self) {
			// A link to deepcode itself would run it again, and again.
			continue
		}
		code, err := execTUI(p, a.args)
		if err != nil {
			return errs.Wrap(err, errs.TUIUnavailable, "the terminal UI is %s, which cannot run (%v): reinstall deepcode", p, err)
		}
		if code != exitOK {
			return &exitError{code: code} // deepcode-tui said why
		}
		return nil
	}
	return errs.New(errs.TUIUnavailable, "the terminal UI is %s%s, which is not beside deepcode nor in $DEEPCODE_LIBEXEC (looked in %s): reinstall deepcode, or set DEEPCODE_LIBEXEC to the folder that holds it",
		tuiBinaryName, exeSuffix, strings.Join(slices.Compact(dirs), ", "))
}
