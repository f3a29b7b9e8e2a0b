package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/spf13/cobra"
)

// installOutput is what install and uninstall print with --json.
type installOutput struct {
	Installed  bool     `json:"installed"`
	Changed    bool     `json:"changed"`
	Manager    string   `json:"manager"`
	Unit       string   `json:"unit,omitempty"`
	Database   string   `json:"database"`
	DBID       string   `json:"dbId"`
	Executable string   `json:"executable,omitempty"`
	Libexec    string   `json:"libexec,omitempty"`
	Port       int      `json:"port,omitempty"`
	Files      []string `json:"files"`
	Note       string   `json:"note,omitempty"`
}

func (a *app) installCommand() *cobra.Command {
	var atLogin bool
	var pathEnv string
	var port int
	cmd := &cobra.Command{
		Use:   "install --at-login",
		Short: "Start the service at login through the platform's service manager (does not start it now)",
		Long: `Install registers this database's service with your user's service manager
(systemd user units on Linux, a LaunchAgent on macOS, a logon task on
Windows), to start at your next login. It does not start
the service: run "deepcode service start". The units record the deepcode
executable as you invoked it, DEEPCODE_HOME, the database and PATH (or --path);
credentials and proxy settings are never copied from the shell.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !atLogin {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "say when the service should start: --at-login (the only mode so far)")}
			}
			if err := a.setup(cmd, map[string]string{"port": "port"}); err != nil {
				return err
			}
			port = a.cfg.Port
			if port < 1 || port > 65535 {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--port %d: a service started at login needs a fixed port from 1 to 65535", port)}
			}
			if cmd.Flags().Changed("path") && pathEnv == "" {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--path must not be empty")}
			}
			if pathEnv == "" {
				pathEnv = os.Getenv("PATH")
			}
			mgr, err := newServiceManager(a.layout)
			if err != nil {
				return err
			}
			if _, err := mgr.Installed(); err != nil {
				return err
			}
			exe, err := invokedExecutable()
			if err != nil {
				return err
			}
			libexec, err := serviceLibexec(exe)
			if err != nil {
				return err
			}
			lock, err := a.managementLock(cmd.Context())
			if err != nil {
				return err
			}
			defer lock.Release()
			rec := installRecord{
				Manager: mgr.Name(), DBID: a.layout.DBID, Database: a.layout.Database, Home: a.layout.Home,
				Executable: exe, Libexec: libexec, Path: pathEnv, Port: port, Version: buildinfo.Version,
			}
			res, err := mgr.Install(cmd.Context(), rec)
			if err != nil {
				return err
			}
			note := "installed: it starts at your next login; `deepcode service start` starts it now"
			if !res.Changed {
				note = "already installed with these settings"
			}
			if st, err := a.connectedStatus(cmd.Context()); err == nil && st.Activation != mgr.Name() {
				note += fmt.Sprintf("; the manually started instance %s keeps running: `deepcode service restart` hands it over to %s once its work has drained", st.InstanceID, mgr.Name())
			}
			out := installOutput{Installed: true, Changed: res.Changed, Manager: mgr.Name(), Unit: res.Unit, Database: a.layout.Database,
				DBID: a.layout.DBID, Executable: exe, Libexec: libexec, Port: port, Files: res.Files, Note: note}
			if out.Files == nil {
				out.Files = []string{}
			}
			a.printInstall(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&atLogin, "at-login", false, "start the service when you log in")
	cmd.Flags().StringVar(&pathEnv, "path", "", "PATH for the service (default: this shell's PATH)")
	cmd.Flags().IntVar(&port, "port", 3081, "TCP port on 127.0.0.1 (fixed: 1-65535)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) uninstallCommand() *cobra.Command {
	var o stopOptions
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the login startup (stopping a managed service first; a manually started one keeps running)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			mgr, err := newServiceManager(a.layout)
			if err != nil {
				return err
			}
			lock, err := a.managementLock(cmd.Context())
			if err != nil {
				return err
			}
			defer lock.Release()
			out := installOutput{Manager: mgr.Name(), Database: a.layout.Database, DBID: a.layout.DBID, Files: []string{}}
			rec, err := mgr.Installed()
			if err != nil {
				return err
			}
			if rec == nil {
				out.Note = "was not installed"
				a.printInstall(out)
				return nil
			}
			out.Unit, out.Executable, out.Port = "", rec.Executable, rec.Port
			// A managed instance is stopped with the stop policy; a manual one
			// is left alone.
			var notes []string
			m, st, err := a.connectVerified(cmd.Context())
			switch {
			case err == nil && st.Activation == mgr.Name():
				note, err := a.managedStop(cmd.Context(), m, st, mgr, rec, o)
				m.Close()
				if err != nil {
					return err
				}
				notes = append(notes, note)
			case err == nil:
				m.Close()
				notes = append(notes, fmt.Sprintf("the manually started instance %s keeps running", st.InstanceID))
			case !a.notRunning(err):
				return err
			}
			removed, err := mgr.Uninstall(cmd.Context(), rec)
			out.Files = append(out.Files, removed...)
			if err != nil {
				return err
			}
			notes = append(notes, "uninstalled; project files, sessions and credentials are kept")
			out.Note = joinNotes(notes)
			a.printInstall(out)
			return nil
		},
	}
	a.stopFlags(cmd, &o)
	return cmd
}

func joinNotes(n []string) string {
	s := ""
	for i, x := range n {
		if i > 0 {
			s += "; "
		}
		s += x
	}
	return s
}

func (a *app) printInstall(o installOutput) {
	if a.jsonOut {
		a.printJSON(o)
		return
	}
	if o.Installed {
		fmt.Fprintf(a.stdout, "deepcode service: installed for login (%s %s)\n", o.Manager, o.Unit)
		fmt.Fprintf(a.stdout, "  database:   %s (id %s)\n", o.Database, o.DBID)
		fmt.Fprintf(a.stdout, "  executable: %s (services in %s)\n", o.Executable, o.Libexec)
		fmt.Fprintf(a.stdout, "  port:       %d\n", o.Port)
	} else {
		fmt.Fprintf(a.stdout, "deepcode service: not installed (database %s)\n", o.Database)
	}
	for _, f := range o.Files {
		fmt.Fprintf(a.stdout, "  %s %s\n", map[bool]string{true: "wrote  ", false: "removed"}[o.Installed], f)
	}
	if o.Note != "" {
		fmt.Fprintf(a.stdout, "  %s\n", o.Note)
	}
}

// connectVerified connects to the live instance and reads its status.
func (a *app) connectVerified(ctx context.Context) (*client.Management, mgmt.Status, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := client.Connect(cctx, a.layout, client.Options{})
	if err != nil {
		return nil, mgmt.Status{}, err
	}
	st, err := m.Status(cctx)
	if err != nil {
		m.Close()
		return nil, mgmt.Status{}, err
	}
	return m, st, nil
}

// managedStop stops an instance the service manager owns: drain (or cancel)
// through the management protocol first, then stop the managed job so that
// it is not restarted. If the job cannot be stopped, admission is restored.
// A drain timeout leaves the job running (the manager restores admission).
func (a *app) managedStop(ctx context.Context, m *client.Management, st mgmt.Status, mgr serviceManager, rec *installRecord, o stopOptions) (string, error) {
	timeout := o.timeout
	if timeout == 0 {
		timeout = a.cfg.Service.StopTimeout
	}
	secs := timeout.Seconds()
	stopProgress := a.progress(fmt.Sprintf("stopping instance %s through %s (draining up to %s)…", st.InstanceID, mgr.Name(), timeout))
	defer stopProgress()
	callCtx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	drained := false
	var res mgmt.PhaseResult
	switch {
	case o.cancelRunning:
		// The manager drains, cancels, and ends itself; the job stop below
		// takes the rest (and the sockets) down.
		drain := true
		if err := m.Call(callCtx, mgmt.MethodStop, mgmt.StopParams{Drain: &drain, Timeout: &secs, CancelRunning: true}, &res); err != nil {
			return "", err
		}
	case o.drain:
		if err := m.Call(callCtx, mgmt.MethodDrain, mgmt.DrainParams{Timeout: &secs}, &res); err != nil {
			return "", err
		}
		drained = true
	}
	stopCtx, cancelStop := context.WithTimeout(ctx, a.cfg.Service.StopTimeout+60*time.Second)
	defer cancelStop()
	if err := mgr.Stop(stopCtx, rec); err != nil {
		if drained {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			rerr := m.Call(rctx, mgmt.MethodResume, nil, &res)
			rcancel()
			if rerr != nil {
				return "", errs.Wrap(err, errs.CodeOf(err), "%s could not stop the service (%s), and restoring admission failed too (%s): run `deepcode service start` to resume it",
					mgr.Name(), errs.From(err).Message, errs.From(rerr).Message)
			}
		}
		return "", errs.Wrap(err, errs.CodeOf(err), "%s could not stop the service: %s; admission was restored and it keeps running", mgr.Name(), errs.From(err).Message)
	}
	if err := a.waitGone(ctx, st.PID, a.cfg.Service.StopTimeout+15*time.Second); err != nil {
		return "", err
	}
	return fmt.Sprintf("stopped instance %s (%s will not restart it until the next start or login)", st.InstanceID, mgr.Name()), nil
}

// managedInstall returns the platform manager and the install record when
// this database is installed; (nil, nil, nil) when it is not, or when the
// platform has no manager yet.
func (a *app) managedInstall() (serviceManager, *installRecord, error) {
	mgr, err := newServiceManager(a.layout)
	if err != nil {
		return nil, nil, err
	}
	rec, err := mgr.Installed()
	if errs.Is(err, errs.NotImplemented) || rec == nil {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return mgr, rec, nil
}
