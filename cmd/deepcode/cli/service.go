package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/logging"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// statusOutput is what status, start and stop print with --json: the same
// shape whether or not the service runs.
type statusOutput struct {
	Running bool `json:"running"`
	mgmt.Status
	// Note says what happened beyond the status (e.g. a replacement).
	Note string `json:"note,omitempty"`
}

func (a *app) serviceCommand() *cobra.Command {
	svc := &cobra.Command{
		Use:   "service",
		Short: "Start, inspect and stop the background service",
		// Runnable, so that an unknown subcommand is a usage error rather
		// than cobra's help with exit status 0; alone it prints the help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	svc.AddCommand(a.startCommand(), a.statusCommand(), a.stopCommand(), a.restartCommand(), a.logsCommand())
	svc.AddCommand(a.installCommand(), a.uninstallCommand(), a.doctorCommand())
	svc.AddCommand(a.backupCommand(), a.restoreCommand(), a.verifyCommand(), a.rebuildCommand())
	return svc
}

func (a *app) startCommand() *cobra.Command {
	var port int
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the service (or find the running one) and wait until it is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, map[string]string{"port": "port"}); err != nil {
				return err
			}
			st, started, err := a.start(cmd.Context(), startOptions{port: port, portSet: cmd.Flags().Changed("port")})
			if err != nil {
				return err
			}
			a.printStatus(st, startedNote(started))
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 3081, "TCP port on 127.0.0.1 (0 picks a free port)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the status as JSON")
	return cmd
}

func startedNote(started bool) string {
	if started {
		return "started"
	}
	return "already running"
}

func (a *app) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the service's status (exit 3 when it is not running)",
		Long: `Show the service's status: its phase, address, services and activity.

The exit status says whether an instance exists, as systemctl status does:
0 while one runs in any phase — starting, running, draining or stopping (its
graceful stop still runs) — and 3 when none runs, also when the database's
folder does not exist. --json prints the same object in every case, with
"running" and "phase". A status taken while an instance starts or stops
reports that phase; it is never an error. status creates no file or folder.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runStatus(cmd.Context(), cmd.Flags())
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the status as JSON")
	return cmd
}

// runStatus is service status, with flags the command's parsed flags.
func (a *app) runStatus(ctx context.Context, flags *pflag.FlagSet) error {
	if err := a.setupLookOnly(flags); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, note, err := a.observeStatus(ctx)
	if err != nil {
		return err
	}
	a.printStatus(st, note)
	if st.Phase == mgmt.PhaseStopped {
		return &exitError{code: exitNotRunning}
	}
	return nil
}

// quickStatus reports whether args are a plain service status — the two
// words and nothing but --json and --database, in any order — and if so
// the flags they set (in a, and as the flag set config.Load reads), as
// cobra would parse them. Monitors and scripts call status often, and its
// cost is mostly the process's start: making the command tree, even the
// lazy one, was a fifth of it. Anything else (help, a misspelling, an
// unknown flag, a bad value) is left to cobra, whose messages and exit
// statuses stay the only ones (TestQuickStatusMatchesCobra).
func (a *app) quickStatus(args []string) (*pflag.FlagSet, bool) {
	if len(args) < 2 || len(args) > 6 {
		return nil, false
	}
	// --json is status's own flag, which cobra takes only after the
	// command's name; --database is the root's, taken anywhere.
	words := 0
	for i := 0; i < len(args); i++ {
		switch arg := args[i]; {
		case arg == "--database":
			i++
		case strings.HasPrefix(arg, "--json"):
			if words < 2 {
				return nil, false
			}
		case strings.HasPrefix(arg, "--database="):
		case strings.HasPrefix(arg, "-"):
			return nil, false
		default:
			words++
		}
	}
	// Parsed into its own variables: a refused line leaves a as it was,
	// for cobra.
	var database string
	var jsonOut bool
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&database, "database", "", "")
	fs.BoolVar(&jsonOut, "json", false, "")
	if fs.Parse(args) != nil {
		return nil, false
	}
	if rest := fs.Args(); len(rest) != 2 || rest[0] != "service" || rest[1] != "status" {
		return nil, false
	}
	a.database, a.jsonOut = database, jsonOut
	return fs, true
}

// statusSettle bounds how long status retries while an instance is between
// states (its manager closing, its discovery files being written) before it
// reports the transient phase it saw.
const statusSettle = 2 * time.Second

// observeStatus is what status reports: the live instance's status, the
// stopped status when none runs, or — while an instance holds instance.lock
// but its manager does not answer (it is starting or stopping) — that
// phase, with a note saying what was seen. Only a fault that persists (an
// impostor at the socket, a damaged token, an unreadable file) is an error.
func (a *app) observeStatus(ctx context.Context) (mgmt.Status, string, error) {
	if !a.layout.Exists() {
		return a.stoppedStatus(), "", nil
	}
	settle := time.Now().Add(statusSettle)
	for {
		st, err := a.connectedStatus(ctx)
		if err == nil {
			return st, "", nil
		}
		held := discovery.InstanceLockHeld(a.layout)
		if !held && a.notRunning(err) {
			return a.stoppedStatus(), "", nil
		}
		if !transientStatusError(err, held) {
			return mgmt.Status{}, "", err
		}
		if time.Now().After(settle) || sleepCtx(ctx, 50*time.Millisecond) != nil {
			if !held {
				// The instance went away while we asked, and its lock is
				// free now.
				return a.stoppedStatus(), "", nil
			}
			return a.transientStatus(err), fmt.Sprintf("instance.lock is held but the manager does not answer yet (%s); run status again, or see `deepcode service logs`", errs.From(err).Message), nil
		}
	}
}

// transientStatusError reports the errors an instance that is starting or
// stopping causes: a manager that closes or is not listening yet, discovery
// files of the instance going away or of its successor being written (an
// identity that does not match the token read a moment before, while the
// instance lock is held).
func transientStatusError(err error, lockHeld bool) bool {
	switch errs.CodeOf(err) {
	case errs.ServiceNotRunning, errs.ServiceUnavailable, errs.ConnectionLost, errs.InstanceReplaced:
		return true
	case errs.IdentityMismatch:
		return lockHeld
	}
	return false
}

// transientStatus is the status of an instance whose root process holds
// instance.lock while its manager does not answer: "starting" until its
// discovery record is written, "stopping" once its manager has gone.
func (a *app) transientStatus(err error) mgmt.Status {
	st := a.stoppedStatus()
	st.Phase = mgmt.PhaseStarting
	if inst, rerr := discovery.ReadInstance(a.layout); rerr == nil {
		st.InstanceID, st.PID, st.Port, st.Address = inst.InstanceID, inst.PID, inst.Port, inst.Address
		if !errs.Is(err, errs.IdentityMismatch) {
			st.Phase = mgmt.PhaseStopping
		}
	}
	return st
}

// notRunning reports errors that mean "no live instance": a missing or stale
// discovery record nobody holds the lock for.
func (a *app) notRunning(err error) bool {
	switch errs.CodeOf(err) {
	case errs.ServiceNotRunning:
		return true
	case errs.IdentityMismatch:
		return !discovery.InstanceLockHeld(a.layout)
	}
	return false
}

func (a *app) stoppedStatus() mgmt.Status {
	return mgmt.Status{Phase: mgmt.PhaseStopped, Database: a.layout.Database, DBID: a.layout.DBID,
		Sockets: map[string]string{}, Services: map[string]mgmt.ServiceState{}}
}

func (a *app) printStatus(st mgmt.Status, note string) {
	running := st.Phase != mgmt.PhaseStopped
	if a.jsonOut {
		a.printJSON(statusOutput{Running: running, Status: st, Note: note})
		return
	}
	if !running {
		fmt.Fprintf(a.stdout, "deepcode service: not running (database %s)\n", st.Database)
		if note != "" {
			fmt.Fprintf(a.stdout, "  %s\n", note)
		}
		return
	}
	w := a.stdout
	fmt.Fprintf(w, "deepcode service: %s", st.Phase)
	if note != "" {
		fmt.Fprintf(w, " (%s)", note)
	}
	fmt.Fprintln(w)
	if st.Activation == "" {
		// Starting or stopping, and the manager did not answer: what the
		// discovery record says, if anything.
		if st.InstanceID != "" {
			fmt.Fprintf(w, "  instance:   %s (pid %d)\n", st.InstanceID, st.PID)
		}
		fmt.Fprintf(w, "  database:   %s (id %s)\n", st.Database, st.DBID)
		return
	}
	fmt.Fprintf(w, "  instance:   %s (pid %d, %s)\n", st.InstanceID, st.PID, st.Activation)
	fmt.Fprintf(w, "  address:    http://%s\n", st.Address)
	fmt.Fprintf(w, "  database:   %s (id %s, schema %d)\n", st.Database, st.DBID, st.SchemaVersion)
	fmt.Fprintf(w, "  version:    %s (protocol %s)\n", st.Version, st.ProtocolVersion)
	fmt.Fprintf(w, "  activity:   %d turns, %d terminals, %d handlers\n", st.Activity.Turns, st.Activity.Terminals, st.Activity.Handlers)
	names := make([]string, 0, len(st.Services))
	for n := range st.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		s := st.Services[n]
		if s.PID != 0 {
			parts = append(parts, fmt.Sprintf("%s %s (pid %d)", n, s.State, s.PID))
		} else {
			parts = append(parts, fmt.Sprintf("%s %s", n, s.State))
		}
	}
	fmt.Fprintf(w, "  services:   %s\n", strings.Join(parts, ", "))
	for _, n := range names {
		if s := st.Services[n]; s.Reason != "" {
			fmt.Fprintf(w, "  %s %s: %s (%s)\n", n, s.State, s.Reason, s.Code)
		}
	}
}

type stopOptions struct {
	drain         bool
	timeout       time.Duration
	cancelRunning bool
}

func (a *app) stopFlags(cmd *cobra.Command, o *stopOptions) {
	cmd.Flags().BoolVar(&o.drain, "drain", true, "wait for admitted turns and open terminals to finish first (--drain=false stops at once)")
	cmd.Flags().Var((*seconds)(&o.timeout), "timeout", "how long to wait for work to drain, in seconds or as a duration (60, 90s, 2m); default service.stop_timeout")
	cmd.Flags().BoolVar(&o.cancelRunning, "cancel-running", false, "cancel running turns and close terminals, then stop")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
}

func (a *app) stopCommand() *cobra.Command {
	var o stopOptions
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Drain and stop the service (exits non-zero and keeps it running if the drain times out)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			lock, err := a.managementLock(cmd.Context())
			if err != nil {
				return err
			}
			defer lock.Release()
			res, err := a.stop(cmd.Context(), o)
			if err != nil {
				return err
			}
			a.printStatus(a.stoppedStatus(), res)
			return nil
		},
	}
	a.stopFlags(cmd, &o)
	return cmd
}

func (a *app) restartCommand() *cobra.Command {
	var o stopOptions
	var port int
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Stop the service (draining by default) and start it again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, map[string]string{"port": "port"}); err != nil {
				return err
			}
			so := startOptions{port: port, portSet: cmd.Flags().Changed("port")}
			lock, err := a.managementLock(cmd.Context())
			if err != nil {
				return err
			}
			mgr, _, err := a.managedInstall()
			if err != nil {
				lock.Release()
				return err
			}
			if st, err := a.connectedStatus(cmd.Context()); err == nil && !so.portSet && mgr == nil {
				// Keep the port the instance had (it may have been picked by --port 0).
				so.port, so.portSet = st.Port, true
			}
			if _, err := a.stop(cmd.Context(), o); err != nil {
				lock.Release()
				return err
			}
			lock.Release()
			st, _, err := a.start(cmd.Context(), so)
			if err != nil {
				return err
			}
			a.printStatus(st, "restarted")
			return nil
		},
	}
	a.stopFlags(cmd, &o)
	cmd.Flags().IntVar(&port, "port", 3081, "TCP port for the new instance (default: the old instance's)")
	return cmd
}

func (a *app) logsCommand() *cobra.Command {
	var lines int
	var follow bool
	var since, level string
	var services []string
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "Print the service log (from the journal when installed under systemd)",
		Long: `Print the last records of the service log, oldest first, in time order across services.

--since, --level and --service select records; --lines counts what they select. With --json
every record is one JSON object on a line of its own: time, level, service, msg, then its
attributes (a line that is not a record, such as a crash's trace, is {"time", "raw": true, "msg"}).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if lines < 0 {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--lines must be 0 or more")}
			}
			if follow && a.jsonOut {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--follow cannot be combined with --json")}
			}
			filter, err := logFilter(since, level, services)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			filtered := !filter.Since.IsZero() || filter.MinLevel != nil || len(filter.Services) > 0
			if follow && filtered {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--follow cannot be combined with --since, --level or --service: filter the followed lines with grep")}
			}
			// With a filter, every line kept is read, and --lines counts the
			// records it selects.
			read := lines
			if filtered && lines > 0 {
				read = maxLogLines
			}
			if args, ok := a.journalLogArgs(read, follow); ok {
				return a.journalLogs(cmd.Context(), args, lines, filter)
			}
			if follow {
				// One open of the file for the tail and the follow: nothing
				// written in between is lost.
				return logging.TailFollow(cmd.Context(), a.layout.ServiceLog(), lines, a.stdout, 200*time.Millisecond)
			}
			got, err := logging.Tail(a.layout.ServiceLog(), read)
			return a.printLog(got, err, lines, filter)
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 50, "how many of the last records to print")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing lines as they are written (Ctrl-C ends)")
	cmd.Flags().StringVar(&since, "since", "", "only records from this time on: a duration back from now (10m, 2h) or an RFC 3339 time")
	cmd.Flags().StringVar(&level, "level", "", "only records at this level or above: debug, info, warn or error")
	cmd.Flags().StringSliceVar(&services, "service", nil, "only records of these services (and the supervisor's about them): supervisor, manager, gateway, agentd, termhost, scheduler")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print one JSON object per record")
	return cmd
}

// maxLogLines bounds what a filtered `service logs` reads: more than the
// live log and its backups hold.
const maxLogLines = 1 << 20

// logFilter checks and converts the filter flags of `service logs`.
func logFilter(since, level string, services []string) (logging.Filter, error) {
	var f logging.Filter
	if since != "" {
		if d, err := time.ParseDuration(since); err == nil && d >= 0 {
			f.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, since); err == nil {
			f.Since = t
		} else {
			return f, errs.New(errs.UsageError, "--since %q is neither a duration (10m, 2h) nor an RFC 3339 time (2026-12-02T10:00:00Z)", since)
		}
	}
	if level != "" {
		l, err := logging.ParseLevel(level)
		if err != nil {
			return f, errs.New(errs.UsageError, "--level %q: use debug, info, warn or error", level)
		}
		f.MinLevel = &l
	}
	known := append([]string{"supervisor"}, topology.Names()...)
	for _, s := range services {
		if !slices.Contains(known, s) {
			return f, errs.New(errs.UsageError, "--service %q: use one of %s", s, strings.Join(known, ", "))
		}
		f.Services = append(f.Services, s)
	}
	return f, nil
}

// journalLogArgs are journalctl's arguments when this database is installed
// under a service manager that logs to the journal (systemd); ok is false
// otherwise, and the logs are in service.log.
func (a *app) journalLogArgs(lines int, follow bool) ([]string, bool) {
	m, err := newServiceManager(a.layout)
	if err != nil {
		return nil, false
	}
	j, ok := m.(interface {
		journalArgs(lines int, follow bool) []string
	})
	if !ok {
		return nil, false
	}
	if rec, err := m.Installed(); err != nil || rec == nil {
		return nil, false
	}
	return j.journalArgs(lines, follow), true
}

// journalLogs prints the instance's records from the journal through
// journalctl, which is how the journal is read without linking libsystemd.
func (a *app) journalLogs(ctx context.Context, args []string, lines int, filter logging.Filter) error {
	bin, err := exec.LookPath("journalctl")
	if err != nil {
		return errs.New(errs.NotFound, "this instance is installed under systemd, whose services log to the journal, and journalctl is not on PATH: install systemd's journalctl or read the journal with another tool")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if !a.jsonOut && filter.Since.IsZero() && filter.MinLevel == nil && len(filter.Services) == 0 {
		cmd.Stdout = a.stdout
		if err := cmd.Run(); err != nil && ctx.Err() == nil {
			return errs.New(errs.Internal, "journalctl %s failed: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	out, err := cmd.Output()
	if err != nil {
		return errs.New(errs.Internal, "journalctl %s failed: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	text := strings.TrimRight(string(out), "\n")
	var got []string
	if text != "" {
		got = strings.Split(text, "\n")
	}
	return a.printLog(got, nil, lines, filter)
}

// printLog prints the last n records that filter selects among lines read
// from the service log, in time order: as they were written, or with --json
// one JSON object per record. A missing log is NOT_FOUND with what it means.
func (a *app) printLog(got []string, err error, n int, filter logging.Filter) error {
	if err != nil {
		if errs.Is(err, errs.NotFound) {
			return errs.New(errs.NotFound, "no service log yet at %s: the service has not run with this database", a.layout.ServiceLog())
		}
		return err
	}
	recs := logging.Records(got, filter)
	if len(recs) > n {
		recs = recs[len(recs)-n:]
	}
	for _, r := range recs {
		if a.jsonOut {
			a.printJSON(r)
		} else {
			fmt.Fprintln(a.stdout, r.Line)
		}
	}
	return nil
}

// printLogBlob prints lines read from the service log, or {"logs": text}
// with --json (the shape seed 004 gives `agents daemon logs`); a missing
// log is NOT_FOUND with what it means.
func (a *app) printLogBlob(got []string, err error) error {
	if err != nil {
		if errs.Is(err, errs.NotFound) {
			return errs.New(errs.NotFound, "no service log yet at %s: the service has not run with this database", a.layout.ServiceLog())
		}
		return err
	}
	if a.jsonOut {
		text := strings.Join(got, "\n")
		if len(got) > 0 {
			text += "\n"
		}
		a.printJSON(map[string]string{"logs": text})
		return nil
	}
	for _, l := range got {
		fmt.Fprintln(a.stdout, l)
	}
	return nil
}
