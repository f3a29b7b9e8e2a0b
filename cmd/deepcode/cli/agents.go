package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/spf13/cobra"
)

// The agents commands' output. Receipts hold only the id and status; no
// workspace paths, provider session ids or timestamps reach the output.

type agentReceipt struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type agentView struct {
	ID       string     `json:"id"`
	Status   string     `json:"status"`
	Response string     `json:"response,omitempty"`
	Error    *errs.Wire `json:"error,omitempty"`
	// ErrorCode and ErrorRetryable repeat error's code and retryable flat,
	// as the agent record carries them (present exactly when error is).
	ErrorCode      errs.Code `json:"errorCode,omitempty"`
	ErrorRetryable *bool     `json:"errorRetryable,omitempty"`
}

type agentSummary struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	Profile string `json:"profile"`
	Title   string `json:"title"`
}

func (a *app) agentsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Run and inspect logical agents in the background service",
		Long: `Run and inspect logical agents. Each agent is a thread in the background
service (started when needed); its id (thr_…) is the only way to name it:
ids are never completed from a prefix, and provider session ids are not
agent ids.

With --json every command prints one compact JSON value; an immediate failure
prints {"error":{"code","message","retryable"}} and exits non-zero.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.agentsRunCommand(), a.agentsContinueCommand(), a.agentsShowCommand(), a.agentsListCommand(), a.agentsDaemonCommand())
	return cmd
}

// withBusiness sets up, starts the service if needed and runs fn on a
// business connection.
func (a *app) withBusiness(cmd *cobra.Command, fn func(ctx context.Context, b *client.Business) error) error {
	if err := a.setup(cmd, nil); err != nil {
		return err
	}
	b, err := a.business(cmd.Context())
	if err != nil {
		return err
	}
	defer b.Close()
	return fn(cmd.Context(), b)
}

func (a *app) printReceipt(r agentReceipt) {
	if a.jsonOut {
		a.printJSON(r)
		return
	}
	fmt.Fprintf(a.stdout, "%s %s\n", r.ID, r.Status)
}

func (a *app) agentsRunCommand() *cobra.Command {
	var profile, provider, workspace string
	var trust bool
	cmd := &cobra.Command{
		Use:   "run [flags] PROMPT...",
		Short: "Start a new logical agent from a profile or a provider",
		Long: `Start a new logical agent: a thread with the prompt as its first turn, run in
the background. Prints the agent's id and status ({"id","status"} with
--json); follow it with "deepcode agents show ID". "-" alone reads the prompt
from stdin.

One agent at a time per workspace: while another agent has not finished in
the folder, run (and continue of an agent of that folder) fails with
WORKSPACE_CONFLICT, naming that agent; wait for it or use another folder.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if profile != "" && provider != "" {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--profile and --provider are alternatives: give one")}
			}
			prompt, err := taskText(args, os.Stdin)
			if err != nil {
				return err
			}
			ws, err := workspacePath(workspace)
			if err != nil {
				return err
			}
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				params := map[string]any{"workspace": ws, "prompt": prompt}
				if profile != "" {
					params["profile"] = profile
				}
				if provider != "" {
					params["provider"] = provider
				}
				if trust {
					params["trust"] = true
				}
				var r agentReceipt
				if err := call(ctx, b, api.MethodAgentRun, params, &r); err != nil {
					return err
				}
				a.printReceipt(r)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "", `the agent profile (default: "deepcode" once [profiles.deepcode] names a model, else "shell")`)
	f.StringVar(&provider, "provider", "", "a provider (exec, script, …): the profile named after it, or the first that uses it")
	f.StringVar(&workspace, "workspace", "", "the workspace folder (default: the current directory)")
	f.BoolVar(&trust, "trust", false, "trust the workspace (an explicit grant, recorded once)")
	f.BoolVar(&a.jsonOut, "json", false, `print {"id","status"}`)
	return cmd
}

func (a *app) agentsContinueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "continue ID PROMPT...",
		Short: "Give an existing logical agent another prompt",
		Long: `Queue another turn for the agent ID (its exact id, thr_…). Prints the id and
status ({"id","status"} with --json). "-" alone reads the prompt from stdin.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt, err := taskText(args[1:], os.Stdin)
			if err != nil {
				return err
			}
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				var r agentReceipt
				if err := call(ctx, b, api.MethodAgentContinue, map[string]any{"id": args[0], "prompt": prompt}, &r); err != nil {
					return err
				}
				a.printReceipt(r)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `print {"id","status"}`)
	return cmd
}

func (a *app) agentsShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a logical agent's status and its response or failure",
		Long: `Show the agent ID (its exact id, thr_…): its status and the latest response,
or the structured failure of its latest turn. With --json:
{"id", "status", "response"?, "error"?: {"code", "message", "retryable"},
"errorCode"?, "errorRetryable"?}; errorCode and errorRetryable repeat the
error's code and retryable, present exactly when error is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				var v struct {
					agentView
					Error *business.Error `json:"error,omitempty"`
				}
				if err := call(ctx, b, api.MethodAgentShow, map[string]any{"id": args[0]}, &v); err != nil {
					return err
				}
				out := v.agentView
				if v.Error != nil {
					w := v.Error.Err().ToWire()
					out.Error = &w
					out.ErrorCode, out.ErrorRetryable = w.Code, &w.Retryable
				}
				if a.jsonOut {
					a.printJSON(out)
					return nil
				}
				fmt.Fprintf(a.stdout, "%s %s\n", out.ID, out.Status)
				if out.Error != nil {
					fmt.Fprintf(a.stdout, "error: %s (%s)\n", out.Error.Message, out.Error.Code)
				}
				if out.Response != "" {
					fmt.Fprintln(a.stdout, strings.TrimSuffix(out.Response, "\n"))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `print {"id","status","response"?,"error"?,"errorCode"?,"errorRetryable"?}`)
	return cmd
}

func (a *app) agentsListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the logical agents",
		Long:    `List the logical agents: id, status, profile and title ({"agents":[{"id","status","profile","title"}…]} with --json).`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				var res struct {
					Agents []agentSummary `json:"agents"`
				}
				if err := call(ctx, b, api.MethodAgentList, struct{}{}, &res); err != nil {
					return err
				}
				if res.Agents == nil {
					res.Agents = []agentSummary{}
				}
				if a.jsonOut {
					a.printJSON(res)
					return nil
				}
				if len(res.Agents) == 0 {
					fmt.Fprintln(a.stdout, "no agents")
					return nil
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tPROFILE\tTITLE")
				for _, s := range res.Agents {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, s.Status, s.Profile, s.Title)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `print {"agents":[…]}`)
	return cmd
}

// daemonStatus is what `agents daemon status` and `agents daemon stop`
// print: agentd as the authenticated manager reports it. Every key is always
// present.
type daemonStatus struct {
	// Running: an agentd process serves the socket now.
	Running bool `json:"running"`
	// State: "running" or "draining" (a process serves), "standby" or
	// "degraded" (a process serves reads; Reason says why writes are
	// refused), "stopping" (a process finishes its graceful stop; agent
	// commands meanwhile get SERVICE_STOPPING), "idle" (its socket waits;
	// the first connection starts it), "down", or "stopped" (the whole
	// service is not running).
	State string `json:"state"`
	// Reason says why agentd is standby or degraded ("" otherwise).
	Reason    string `json:"reason"`
	PID       int    `json:"pid"`
	StartedAt string `json:"startedAt"`
	// Activity: admitted turns running and queued, RPC handlers, warm
	// runtimes.
	Activity   daemonActivity `json:"activity"`
	InstanceID string         `json:"instanceId"`
	Socket     string         `json:"socket"`
}

type daemonActivity struct {
	Turns    int `json:"turns"`
	Queued   int `json:"queued"`
	Handlers int `json:"handlers"`
	Runtimes int `json:"runtimes"`
}

const daemonStatusHelp = `The status object (--json) is
  {"running":bool, "state":"running"|"draining"|"standby"|"degraded"|"stopping"|
            "idle"|"down"|"stopped",
   "reason":"…"|"", "pid":int, "startedAt":"RFC 3339"|"", "instanceId":"inst_…"|"",
   "activity":{"turns":int,"queued":int,"handlers":int,"runtimes":int},
   "socket":"<path of agentd.sock>"}
running is true while an agentd process runs; "standby" and "degraded" mean it
serves reads but refuses writes for the reason given; "stopping" means it
finishes its graceful stop (agent commands meanwhile get SERVICE_STOPPING,
retryable); "idle" means its socket waits and the next connection starts it;
"stopped" means the whole service is not running.`

func (a *app) daemonStatusOf(st mgmt.Status) daemonStatus {
	ds := daemonStatus{State: mgmt.PhaseStopped, InstanceID: st.InstanceID, Socket: socketAddress(a.layout, paths.AgentdSocket)}
	if s := st.Sockets["agentd"]; s != "" {
		ds.Socket = s
	}
	if st.InstanceID == "" {
		return ds
	}
	ds.State = "idle"
	if s, ok := st.Services["agentd"]; ok {
		ds.State = s.State
		ds.Reason = s.Reason
		ds.PID = s.PID
		ds.StartedAt = s.Started
		ds.Activity = daemonActivity{Turns: s.Activity.Turns, Queued: s.Activity.Queued, Handlers: s.Activity.Handlers, Runtimes: s.Activity.Runtimes}
	}
	// A process in standby or degraded serves too (reads; writes are
	// refused with the reason status shows).
	ds.Running = ds.PID != 0 && (ds.State == "running" || ds.State == "draining" || ds.State == "standby" ||
		ds.State == "degraded" || ds.State == mgmt.PhaseStopping)
	return ds
}

func (a *app) printDaemon(ds daemonStatus, note string) {
	if a.jsonOut {
		a.printJSON(ds)
		return
	}
	w := a.stdout
	switch {
	case ds.State == mgmt.PhaseStopped:
		fmt.Fprintln(w, "agentd: not running (the deepcode service is not running)")
	case ds.Running:
		fmt.Fprintf(w, "agentd: %s (pid %d", ds.State, ds.PID)
		if ds.StartedAt != "" {
			fmt.Fprintf(w, ", since %s", ds.StartedAt)
		}
		fmt.Fprintln(w, ")")
		fmt.Fprintf(w, "  activity: %d turns, %d queued, %d handlers, %d runtimes\n", ds.Activity.Turns, ds.Activity.Queued, ds.Activity.Handlers, ds.Activity.Runtimes)
		if ds.Reason != "" {
			fmt.Fprintf(w, "  reason:   %s\n", ds.Reason)
		}
	default:
		fmt.Fprintf(w, "agentd: %s (started on the next connection)\n", ds.State)
	}
	if ds.State != mgmt.PhaseStopped {
		fmt.Fprintf(w, "  instance: %s\n", ds.InstanceID)
	}
	fmt.Fprintf(w, "  socket:   %s\n", ds.Socket)
	if note != "" {
		fmt.Fprintf(w, "  %s\n", note)
	}
}

func (a *app) agentsDaemonCommand() *cobra.Command {
	d := &cobra.Command{
		Use:   "daemon",
		Short: "Diagnose agentd, the on-demand agent daemon",
		Long: `Diagnose agentd, the on-demand agent daemon: normally nothing needs managing,
as agent commands start it and it exits when idle.

` + daemonStatusHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	d.AddCommand(a.daemonStatusCommand(), a.daemonStopCommand(), a.daemonLogsCommand())
	return d
}

// verifiedStatus is the authenticated manager's status, or nil when the
// service is not running.
func (a *app) verifiedStatus(ctx context.Context) (*mgmt.Status, error) {
	st, err := a.connectedStatus(ctx)
	if err != nil {
		if a.notRunning(err) {
			return nil, nil
		}
		return nil, err
	}
	return &st, nil
}

func (a *app) daemonStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show agentd's state, pid and activity (exit 3 when the service is not running)",
		Long:  "Show agentd's state, pid and activity, as the authenticated manager reports them. Exits 3 when the service is not running.\n\n" + daemonStatusHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			st, err := a.verifiedStatus(cmd.Context())
			if err != nil {
				return err
			}
			if st == nil {
				a.printDaemon(a.daemonStatusOf(mgmt.Status{}), "")
				return &exitError{code: exitNotRunning}
			}
			a.printDaemon(a.daemonStatusOf(*st), "")
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the status object as JSON")
	return cmd
}

func (a *app) daemonStopCommand() *cobra.Command {
	wait := true
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop agentd alone and wait until it has exited (the next connection starts it again)",
		Long: `Stop agentd alone, gracefully: running turns get the service's stop timeout to
finish (a turn that ends in it is recorded completed), then stay durable and
are recovered as interrupted on the next start. agentd is socket-activated:
the next agent command starts it again. The rest of the service keeps running.

By default the command waits until the process has exited (on a terminal it
says what it waits for), then prints the status object. With --wait=false it
returns once the stop has begun and prints the status object with state
"stopping"; until agentd has exited, agent commands get SERVICE_STOPPING
(retryable).

The process signalled is the one the authenticated manager reports as agentd
(never a PID file).

` + daemonStatusHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := a.verifiedStatus(ctx)
			if err != nil {
				return err
			}
			if st == nil {
				a.printDaemon(a.daemonStatusOf(mgmt.Status{}), "was not running")
				return nil
			}
			ds := a.daemonStatusOf(*st)
			if !ds.Running {
				a.printDaemon(ds, "was not running")
				return nil
			}
			pid := ds.PID
			if err := terminateProcess(pid); err != nil && !errors.Is(err, syscall.ESRCH) {
				if _, ok := errs.As(err); ok {
					return err
				}
				return errs.Wrap(err, errs.Internal, "cannot signal agentd (pid %d)", pid)
			}
			if !wait {
				after, err := a.waitDaemonStopping(ctx, pid)
				if err != nil {
					return err
				}
				a.printDaemon(after, fmt.Sprintf("asked agentd (pid %d) to stop", pid))
				return nil
			}
			after, err := a.waitDaemonGone(ctx, pid, a.terminalProgress())
			if err != nil {
				return err
			}
			a.printDaemon(after, fmt.Sprintf("stopped agentd (pid %d)", pid))
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the status object as JSON")
	cmd.Flags().BoolVar(&wait, "wait", true, "wait until agentd has exited (--wait=false returns once its stop has begun)")
	return cmd
}

// terminalProgress is where a long wait says what it waits for: stderr
// when it is a terminal, else nowhere (scripts read the final object only).
func (a *app) terminalProgress() io.Writer {
	if f, ok := a.stderr.(*os.File); ok && !a.quiet && isTerminal(f.Fd()) {
		return f
	}
	return nil
}

// waitDaemonStopping waits, briefly, until the manager reports pid as
// stopping (or gone): the signal is asynchronous, and the status printed
// must not say "running" about a process that is stopping.
func (a *app) waitDaemonStopping(ctx context.Context, pid int) (daemonStatus, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := a.verifiedStatus(ctx)
		if err != nil {
			return daemonStatus{}, err
		}
		if st == nil {
			return a.daemonStatusOf(mgmt.Status{}), nil
		}
		ds := a.daemonStatusOf(*st)
		if ds.PID != pid || ds.State == mgmt.PhaseStopping || time.Now().After(deadline) {
			return ds, nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return ds, nil
		}
	}
}

// waitDaemonGone waits until the manager no longer reports pid as agentd:
// its link to the manager lasts until the process exits. Progress, when
// not nil, hears what the stop still waits for whenever that changes.
func (a *app) waitDaemonGone(ctx context.Context, pid int, progress io.Writer) (daemonStatus, error) {
	limit := a.cfg.Service.StopTimeout + 15*time.Second
	deadline := time.Now().Add(limit)
	said := ""
	defer func() {
		if said != "" {
			fmt.Fprintln(progress)
		}
	}()
	for {
		st, err := a.verifiedStatus(ctx)
		if err != nil {
			return daemonStatus{}, err
		}
		if st == nil {
			return a.daemonStatusOf(mgmt.Status{}), nil
		}
		ds := a.daemonStatusOf(*st)
		if ds.PID != pid {
			return ds, nil
		}
		if progress != nil {
			line := fmt.Sprintf("\ragentd (pid %d) is %s: %d turns running, waiting up to %s for them to finish…", pid, ds.State, ds.Activity.Turns, time.Until(deadline).Round(time.Second))
			if ds.Activity.Turns == 0 {
				line = fmt.Sprintf("\ragentd (pid %d) is %s: closing…", pid, ds.State)
			}
			if line != said {
				fmt.Fprintf(progress, "%s\x1b[K", line)
				said = line
			}
		}
		if time.Now().After(deadline) {
			return ds, errs.New(errs.StopTimeout, "agentd (pid %d) did not stop within %s: see `deepcode agents daemon logs`", pid, limit)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return ds, errs.Wrap(err, errs.StopTimeout, "stopped waiting; agentd (pid %d) may still be stopping", pid)
		}
	}
}

// agentdLine reports whether l is one of the service log's records of
// agentd or of the supervisor's records about it: a space-separated
// service=agentd or child=agentd.
func agentdLine(l string) bool {
	l = " " + l + " "
	return strings.Contains(l, " service=agentd ") || strings.Contains(l, " child=agentd ")
}

// agentdLogs returns the last n log lines about agentd, oldest first.
func agentdLogs(path string, n int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	scan := max(n*8, 512)
	for {
		lines, err := logging.Tail(path, scan)
		if err != nil {
			return nil, err
		}
		var got []string
		for _, l := range lines {
			if agentdLine(l) {
				got = append(got, l)
			}
		}
		if len(got) >= n || len(lines) < scan {
			if len(got) > n {
				got = got[len(got)-n:]
			}
			return got, nil
		}
		scan *= 4
	}
}

func (a *app) daemonLogsCommand() *cobra.Command {
	var lines int
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "Print agentd's lines of the service log",
		Long: `Print the last lines of the service log written by agentd (service=agentd)
or by the supervisor about it (child=agentd). With --json: {"logs":"<text>"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if lines < 0 {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--lines must be 0 or more")}
			}
			return a.printLogBlob(agentdLogs(a.layout.ServiceLog(), lines))
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 50, "how many of the last lines to print")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `print {"logs": "<text>"}`)
	return cmd
}
