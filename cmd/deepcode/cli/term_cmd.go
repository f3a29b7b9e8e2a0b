package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/ids"
	"github.com/spf13/cobra"
)

// The terminals of termhost, from the command line. A terminal belongs to a
// thread (termhost opens it in the thread's workspace); `term new` opens it
// in a thread of its own per workspace, titled "terminals", which the CLI
// remembers, or in the thread that --thread names.
//
// What the CLI remembers lives in the runtime directory (private, per
// instance, gone with a reboot like the terminals themselves):
//
//	term/<terminalId>   "<threadId> <offset>": whose terminal it is and the
//	                    end of what attach has written to a screen
//	term/ws-<hash>      the "terminals" thread of a workspace

const (
	terminalPrefix  = "term_"
	termThreadTitle = "terminals"
	defaultCols     = 80
	defaultRows     = 24
)

// termRow is one terminal as `term ls` and `term new --json` print it: the
// contract's TerminalInfo with its thread and workspace.
type termRow struct {
	ThreadID  string `json:"threadId"`
	Workspace string `json:"workspace"`
	api.TerminalInfo
}

// state is "running", or "exited" (exitCode tells how).
func (r termRow) state() string {
	if r.Exited {
		return "exited"
	}
	return "running"
}

func (a *app) termCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "term",
		Short: "Terminals in the background service: new, attach, ls, close",
		Long: `Terminals run by the background service (termhost) in a workspace. They keep
running when no client is attached: attach joins one like tmux attach, and
ctrl+] detaches from it again.

A terminal belongs to a thread, whose workspace it starts in: term new opens
it in a thread of the workspace titled "terminals" (created the first time),
or in the thread --thread names. The workspace must be trusted (--trust
grants it, as for exec).

Terminals live in the service's memory: they end when the service stops.
With --json every command prints one compact JSON value; a failure prints
{"error":{"code","message","retryable"}} and exits non-zero (an unknown
terminal is NOT_FOUND).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.termNewCommand(), a.termAttachCommand(), a.termLsCommand(), a.termCloseCommand())
	return cmd
}

type termNewOptions struct {
	workspace string
	thread    string
	trust     bool
	cols      int
	rows      int
}

func (a *app) termNewCommand() *cobra.Command {
	var o termNewOptions
	cmd := &cobra.Command{
		Use:   "new [flags] [-- COMMAND [ARG...]]",
		Short: "Open a terminal in a workspace and print its id",
		Long: `Open a terminal in a workspace (the current directory by default) running
the login shell, or COMMAND after "--", and print its id (with --json the
terminal as term ls --json shows it). It runs until it exits or is closed;
join it with deepcode term attach ID.

The size is the current terminal's, or 80x24 when stdout is not a terminal;
--cols and --rows set it (1 to 1000); attach resizes it to its window.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() > 0 || (cmd.ArgsLenAtDash() < 0 && len(args) > 0) {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError,
					"unexpected argument %q: put the command after --, as in deepcode term new -- htop", args[0])}
			}
			if o.thread != "" && cmd.Flags().Changed("workspace") {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--thread and --workspace are alternatives: a thread has its workspace")}
			}
			if o.thread != "" && !ids.Valid("thr_", o.thread) {
				return errs.New(errs.NotFound, "no thread %q (a thread id is thr_ and 16 letters or digits)", o.thread)
			}
			if err := termSize(cmd, &o); err != nil {
				return err
			}
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				return a.termNew(ctx, b, o, args)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.workspace, "workspace", "", "the workspace folder (default: the current directory)")
	f.StringVar(&o.thread, "thread", "", "open the terminal in this thread's workspace instead (thr_…)")
	f.BoolVar(&o.trust, "trust", false, "trust the workspace (an explicit grant, recorded once)")
	f.IntVar(&o.cols, "cols", 0, "columns (default: the current terminal's, else 80)")
	f.IntVar(&o.rows, "rows", 0, "rows (default: the current terminal's, else 24)")
	f.BoolVar(&a.jsonOut, "json", false, "print the terminal as one JSON object")
	return cmd
}

// termSize fills in the size and checks it.
func termSize(cmd *cobra.Command, o *termNewOptions) error {
	w, h, ok := windowSize(os.Stdout.Fd())
	if !ok {
		w, h = defaultCols, defaultRows
	}
	if !cmd.Flags().Changed("cols") {
		o.cols = w
	}
	if !cmd.Flags().Changed("rows") {
		o.rows = h
	}
	if o.cols < 1 || o.cols > 1000 || o.rows < 1 || o.rows > 1000 {
		return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--cols and --rows must be between 1 and 1000, not %dx%d", o.cols, o.rows)}
	}
	return nil
}

func (a *app) termNew(ctx context.Context, b *client.Business, o termNewOptions, command []string) error {
	threadID, ws := o.thread, ""
	if threadID != "" {
		var res api.ThreadWorkspaceResult
		if err := call(ctx, b, api.MethodThreadWorkspace, api.ThreadWorkspaceParams{ThreadID: threadID}, &res); err != nil {
			return err
		}
		ws = res.Workspace
	} else {
		var err error
		if ws, err = workspacePath(o.workspace); err != nil {
			return err
		}
		if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
			return errs.New(errs.InvalidParams, "the workspace %s is not a folder: pass an existing one with --workspace", ws)
		}
		if threadID, err = a.workspaceThread(ctx, b, ws, o.trust); err != nil {
			return err
		}
	}
	params := api.TerminalCreateParams{ThreadID: threadID, Cols: o.cols, Rows: o.rows}
	if len(command) > 0 {
		params.Command = command
	}
	var res api.TerminalCreateResult
	if err := call(ctx, b, api.MethodTerminalCreate, params, &res); err != nil {
		return err
	}
	a.saveTermState(res.TerminalID, termState{ThreadID: threadID})
	if !a.jsonOut {
		fmt.Fprintln(a.stdout, res.TerminalID)
		return nil
	}
	row := termRow{ThreadID: threadID, Workspace: ws, TerminalInfo: api.TerminalInfo{TerminalID: res.TerminalID, Command: command, Cols: o.cols, Rows: o.rows}}
	var list api.TerminalListResult
	if err := call(ctx, b, api.MethodTerminalList, api.TerminalListParams{ThreadID: threadID}, &list); err == nil {
		for _, t := range list.Terminals {
			if t.TerminalID == res.TerminalID {
				row.TerminalInfo = t
			}
		}
	}
	a.printJSON(row)
	return nil
}

// workspaceThread is the "terminals" thread of ws: the remembered one while
// it exists and is in ws, else a new one.
func (a *app) workspaceThread(ctx context.Context, b *client.Business, ws string, trust bool) (string, error) {
	sum := sha256.Sum256([]byte(ws))
	file := filepath.Join(a.termDir(), "ws-"+hex.EncodeToString(sum[:8]))
	if data, err := os.ReadFile(file); err == nil {
		id := strings.TrimSpace(string(data))
		var res api.ThreadWorkspaceResult
		// --trust on an untrusted workspace goes on to thread/start,
		// which records the grant.
		if ids.Valid("thr_", id) && call(ctx, b, api.MethodThreadWorkspace, api.ThreadWorkspaceParams{ThreadID: id}, &res) == nil &&
			res.Workspace == ws && (res.Trusted || !trust) {
			return id, nil
		}
	}
	var th api.ThreadResult
	if err := call(ctx, b, api.MethodThreadStart, api.ThreadStartParams{Workspace: ws, Title: termThreadTitle, Trust: trust}, &th); err != nil {
		if errs.CodeOf(err) == errs.WorkspaceUntrusted && !trust {
			return "", errs.New(errs.WorkspaceUntrusted, "workspace %s is not trusted: run again with --trust to grant it", ws)
		}
		return "", err
	}
	if err := a.ensureTermDir(); err == nil {
		_ = fsutil.WriteFileAtomic(file, []byte(th.Thread.ID+"\n"), 0o600)
	}
	return th.Thread.ID, nil
}

func (a *app) termLsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the terminals with their workspace, size, state and exit code",
		Long: `List the service's terminals, running and recently exited, of every thread:
id, workspace, size, state (running or exited) and exit code, oldest first
within a thread.

--json prints {"terminals":[{"threadId","workspace","terminalId","command",
"cols","rows","exited","exitCode"?,"headOffset"}]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				rows, err := allTerminals(ctx, b)
				if err != nil {
					return err
				}
				if a.jsonOut {
					a.printJSON(struct {
						Terminals []termRow `json:"terminals"`
					}{rows})
					return nil
				}
				if len(rows) == 0 {
					fmt.Fprintln(a.stderr, "no terminals (open one with deepcode term new)")
					return nil
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tSIZE\tWORKSPACE\tCOMMAND")
				for _, r := range rows {
					exit := "-"
					if r.ExitCode != nil {
						exit = strconv.Itoa(*r.ExitCode)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%dx%d\t%s\t%s\n", r.TerminalID, r.state(), exit, r.Cols, r.Rows, r.Workspace, strings.Join(r.Command, " "))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print one JSON object")
	return cmd
}

// allTerminals lists the terminals of every thread, archived ones included.
func allTerminals(ctx context.Context, b *client.Business) ([]termRow, error) {
	rows := []termRow{}
	for _, archived := range []bool{false, true} {
		cursor := ""
		for {
			var page api.ThreadListResult
			if err := call(ctx, b, api.MethodThreadList, api.PageParams{Cursor: cursor, Limit: 200, Archived: archived}, &page); err != nil {
				return nil, err
			}
			for _, th := range page.Threads {
				var list api.TerminalListResult
				err := call(ctx, b, api.MethodTerminalList, api.TerminalListParams{ThreadID: th.ID}, &list)
				if errs.CodeOf(err) == errs.NotFound {
					continue // deleted meanwhile
				}
				if err != nil {
					return nil, err
				}
				for _, t := range list.Terminals {
					rows = append(rows, termRow{ThreadID: th.ID, Workspace: th.Workspace, TerminalInfo: t})
				}
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
	}
	return rows, nil
}

// findTerminal resolves a terminal id to its thread: the remembered one,
// else by looking through every thread's terminals.
func (a *app) findTerminal(ctx context.Context, b *client.Business, id string) (termRow, error) {
	notFound := errs.New(errs.NotFound, "no terminal %q: deepcode term ls lists them", id)
	if !ids.Valid(terminalPrefix, id) {
		return termRow{}, notFound
	}
	if st, ok := a.loadTermState(id); ok {
		var list api.TerminalListResult
		if err := call(ctx, b, api.MethodTerminalList, api.TerminalListParams{ThreadID: st.ThreadID}, &list); err == nil {
			for _, t := range list.Terminals {
				if t.TerminalID == id {
					return termRow{ThreadID: st.ThreadID, TerminalInfo: t}, nil
				}
			}
		} else if business.ConnectionError(err) {
			return termRow{}, err
		}
	}
	rows, err := allTerminals(ctx, b)
	if err != nil {
		return termRow{}, err
	}
	for _, r := range rows {
		if r.TerminalID == id {
			return r, nil
		}
	}
	a.removeTermState(id)
	return termRow{}, notFound
}

func (a *app) termCloseCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "close [--json] ID",
		Short: "End a terminal (its process group gets SIGHUP, then SIGKILL)",
		Long: `End a terminal: its process group gets SIGHUP and SIGTERM, and SIGKILL 2 s
later if it is still there; the command returns once it has exited and prints
its exit status. Closing an exited terminal changes nothing.

--json prints the terminal as term ls --json shows it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				row, err := a.findTerminal(ctx, b, args[0])
				if err != nil {
					return err
				}
				var info api.TerminalInfo
				if err := call(ctx, b, api.MethodTerminalClose, api.TerminalRef{ThreadID: row.ThreadID, TerminalID: row.TerminalID}, &info); err != nil {
					return err
				}
				a.removeTermState(row.TerminalID)
				row.TerminalInfo = info
				if a.jsonOut {
					if row.Workspace == "" {
						var ws api.ThreadWorkspaceResult
						if call(ctx, b, api.MethodThreadWorkspace, api.ThreadWorkspaceParams{ThreadID: row.ThreadID}, &ws) == nil {
							row.Workspace = ws.Workspace
						}
					}
					a.printJSON(row)
					return nil
				}
				code := "unknown"
				if info.ExitCode != nil {
					code = strconv.Itoa(*info.ExitCode)
				}
				fmt.Fprintf(a.stdout, "%s closed (exit status %s)\n", row.TerminalID, code)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the closed terminal as one JSON object")
	return cmd
}

// termState is what the CLI remembers of a terminal.
type termState struct {
	ThreadID string
	// Offset is the end of the output attach has written to a screen.
	Offset int64
}

func (a *app) termDir() string { return filepath.Join(a.layout.RuntimeDir, "term") }

func (a *app) ensureTermDir() error {
	if err := a.layout.EnsureRuntimeDir(); err != nil {
		return err
	}
	return fsutil.EnsurePrivateDir(a.termDir())
}

func (a *app) loadTermState(id string) (termState, bool) {
	var st termState
	data, err := os.ReadFile(filepath.Join(a.termDir(), id))
	if err != nil {
		return st, false
	}
	if f := strings.Fields(string(data)); len(f) == 2 && ids.Valid("thr_", f[0]) {
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil && n >= 0 {
			return termState{ThreadID: f[0], Offset: n}, true
		}
	}
	return st, false
}

// saveTermState records st; it is best effort (a failure costs a re-shown
// or a looked-up terminal, never its output), and cheap enough to follow
// every write to the screen: a small file renamed into place, not synced
// (it must survive the CLI being killed, not the machine losing power).
func (a *app) saveTermState(id string, st termState) {
	if a.ensureTermDir() != nil {
		return
	}
	path := filepath.Join(a.termDir(), id)
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(st.ThreadID+" "+strconv.FormatInt(st.Offset, 10)+"\n"), 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
	}
}

func (a *app) removeTermState(id string) {
	if ids.Valid(terminalPrefix, id) {
		_ = os.Remove(filepath.Join(a.termDir(), id))
	}
}
