// Package cli implements the deepcode command.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses.
const (
	exitOK         = 0
	exitFailure    = 1
	exitUsage      = 2
	exitNotRunning = 3 // service status, as systemctl status does
	// After Ctrl-C and termination, as shells report them.
	exitInterrupted = 130 // 128 + SIGINT
	exitTerminated  = 143 // 128 + SIGTERM
)

// exitError carries an exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

// app is the state shared by the commands of one invocation.
type app struct {
	stdout, stderr io.Writer
	database       string
	jsonOut        bool
	// quiet silences progress messages (commands that start the service
	// on the way, such as exec and agents).
	quiet  bool
	layout *paths.Layout
	cfg    *config.Config
	// args are the command line's arguments, for deepcode-tui, which the
	// TUI runs with the same ones; tui is what deepcode-tui adds.
	args []string
	tui  TUIOptions
}

// Main runs the CLI and returns its exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	return run(args, stdout, stderr, TUIOptions{})
}

// TUIMain is Main for deepcode-tui: the same commands and flags, run with
// opts. deepcode runs it for the TUI with its own arguments.
func TUIMain(args []string, stdout, stderr io.Writer, opts TUIOptions) int {
	return run(args, stdout, stderr, opts)
}

func run(args []string, stdout, stderr io.Writer, opts TUIOptions) int {
	a := &app{stdout: stdout, stderr: stderr, args: args, tui: opts}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if flags, ok := a.quickStatus(args); ok {
		return a.exitStatus(a.runStatus(ctx, flags))
	}
	return a.runCommand(ctx, args)
}

// runCommand runs args through the command tree.
func (a *app) runCommand(ctx context.Context, args []string) int {
	root := a.rootCommandFor(args)
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if code, done := a.commandExit(err); done {
		return code
	}
	// cobra's own errors: unknown command or flag, bad arguments. A flag
	// error can stop parsing before --json is reached: look for it.
	// The help to see is that of the command the error is about (cobra
	// returns it: the deepest command found, root for an unknown command).
	a.jsonOut = a.jsonOut || wantsJSON(args)
	if cmd == nil {
		cmd = root
	}
	a.printError(errs.New(errs.UsageError, "%v (see %s --help)", err, cmd.CommandPath()))
	return exitUsage
}

// exitStatus is the exit status of a command that returned err, whose
// error (if any) it prints.
func (a *app) exitStatus(err error) int {
	if code, done := a.commandExit(err); done {
		return code
	}
	a.printError(err)
	return exitFailure
}

// commandExit is the exit status of a command's err, printed, unless err
// is none of the command's own (a usage error of cobra's).
func (a *app) commandExit(err error) (int, bool) {
	if err == nil {
		return exitOK, true
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			a.printError(ee.err)
		}
		return ee.code, true
	}
	if _, ok := errs.As(err); ok {
		a.printError(err)
		return exitFailure, true
	}
	return 0, false
}

// suggestCommands makes every command that has subcommands refuse an
// unknown one with cobra's suggestions ("did you mean"), where cobra.NoArgs
// only says it is unknown.
func suggestCommands(cmd *cobra.Command) {
	if cmd.HasSubCommands() {
		cmd.Args = unknownSubcommand
		// cobra sets its default (2) only on its own path to a
		// suggestion, which cobra.NoArgs-style validation never takes.
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
	}
	for _, c := range cmd.Commands() {
		suggestCommands(c)
	}
}

// unknownSubcommand is cobra.NoArgs for a command with subcommands: its
// error names the closest subcommands (cobra's SuggestionsFor: prefixes,
// and names within SuggestionsMinimumDistance).
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		for i := range s {
			s[i] = strconv.Quote(s[i])
		}
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return errors.New(msg)
}

// wantsJSON reports whether args ask for --json (before any "--").
func wantsJSON(args []string) bool {
	for _, arg := range args {
		if arg == "--" {
			return false
		}
		if v, ok := strings.CutPrefix(arg, "--json"); ok && (v == "" || v[0] == '=') {
			b, err := strconv.ParseBool(strings.TrimPrefix(v, "="))
			return v == "" || (err == nil && b)
		}
	}
	return false
}

// CommandTree returns the deepcode command tree, with cobra's completion
// command as a run adds it, for tools that document the commands
// (packaging/mangen writes the manual pages from it). Nothing is run.
func CommandTree() *cobra.Command {
	root := (&app{stdout: io.Discard, stderr: io.Discard}).rootCommand()
	root.InitDefaultCompletionCmd()
	return root
}

func (a *app) rootCommand() *cobra.Command { return a.rootCommandFor(nil) }

// topCommand is one of deepcode's commands under the root: its name and
// aliases, and what makes its subtree.
type topCommand struct {
	name    string
	aliases []string
	make    func() *cobra.Command
}

func (a *app) topCommands() []topCommand {
	return []topCommand{
		{name: "service", make: a.serviceCommand},
		{name: "serve", make: a.serveCommand},
		{name: "exec", make: a.execCommand},
		{name: "agents", make: a.agentsCommand},
		{name: "web", make: a.webCommand},
		{name: "automations", aliases: []string{"automation"}, make: a.automationsCommand},
		{name: "threads", make: a.threadsCommand},
		{name: "relay", make: a.relayCommand},
		{name: "tui", make: a.tuiCommand},
		{name: "protocol", make: a.protocolCommand},
		{name: "term", make: a.termCommand},
		{name: "version", make: a.versionCommand},
	}
}

// rootCommandFor is the command tree a run of args needs. Making all of it
// (some 60 commands and their flags) was a good part of every short
// command's start — `service status` included, which scripts and
// monitors call often — so when args name one of the top commands, only
// that one's subtree is made. Which one they name is cobra's own decision
// (Find, with the root's flags, so that a flag's value is never taken for
// a command name), taken on stand-ins. Anything else — no command, help,
// completion, an unknown name that wants suggestions — gets the whole
// tree, as do the tools that document it (nil args).
func (a *app) rootCommandFor(args []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "deepcode",
		Short:         "deepcode runs coding agents in a per-user background service",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&a.database, "database", "", "database file of the instance to address (default $DEEPCODE_HOME/state/deepcode.sqlite3)")
	a.tuiRoot(root)      // deepcode with no subcommand: the TUI on a terminal
	a.versionFlags(root) // … or --version
	tops := a.topCommands()
	if top, ok := selectedTop(root, tops, args); ok {
		tops = []topCommand{top}
	}
	for _, t := range tops {
		root.AddCommand(t.make())
	}
	suggestCommands(root)
	a.completeProfileFlags(root)
	return root
}

// selectedTop reports the top command that args select on root, found by
// cobra on stand-ins that are removed again.
func selectedTop(root *cobra.Command, tops []topCommand, args []string) (topCommand, bool) {
	if len(args) == 0 {
		return topCommand{}, false
	}
	standIns := make([]*cobra.Command, len(tops))
	for i, t := range tops {
		standIns[i] = &cobra.Command{Use: t.name, Aliases: t.aliases, Run: func(*cobra.Command, []string) {}}
	}
	root.AddCommand(standIns...)
	found, _, err := root.Find(args)
	root.RemoveCommand(standIns...)
	if err != nil || found == root {
		return topCommand{}, false
	}
	for i, c := range standIns {
		if c == found {
			return tops[i], true
		}
	}
	return topCommand{}, false
}

// setup resolves the layout and configuration for the selected database.
func (a *app) setup(cmd *cobra.Command, flagKeys map[string]string) error {
	l, err := paths.Resolve("", a.database)
	if err != nil {
		return err
	}
	return a.configure(cmd, l, flagKeys)
}

// setupLookOnly is setup for commands that only look (service status): the
// layout is located without creating anything, and a database folder that
// does not exist is no error (no instance can run there).
func (a *app) setupLookOnly(flags *pflag.FlagSet) error {
	l, err := paths.Locate("", a.database)
	if err != nil {
		return err
	}
	return a.configureFlags(flags, l, nil)
}

func (a *app) configure(cmd *cobra.Command, l *paths.Layout, flagKeys map[string]string) error {
	return a.configureFlags(cmd.Flags(), l, flagKeys)
}

func (a *app) configureFlags(flags *pflag.FlagSet, l *paths.Layout, flagKeys map[string]string) error {
	cfg, err := config.Load(config.LoadOptions{File: paths.ConfigFile(l.Home), Flags: flags, FlagKeys: flagKeys})
	if err != nil {
		return err
	}
	a.layout, a.cfg = l, cfg
	return nil
}

// printError writes err as {"error": {...}} on stdout with --json, or as a
// message on stderr.
func (a *app) printError(err error) {
	e := errs.From(err)
	if a.jsonOut {
		a.printJSON(struct {
			Error errs.Wire `json:"error"`
		}{e.ToWire()})
		return
	}
	fmt.Fprintf(a.stderr, "deepcode: %s (%s)\n", e.Message, e.Code)
}

func (a *app) printJSON(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(a.stderr, "deepcode: cannot encode output: %v\n", err)
		return
	}
	fmt.Fprintln(a.stdout, string(b))
}

// progress prints msg on stderr if the returned stop is not called within a
// second: waits shorter than that stay silent.
func (a *app) progress(msg string) (stop func()) {
	if a.quiet {
		return func() {}
	}
	t := time.AfterFunc(time.Second, func() { fmt.Fprintln(a.stderr, msg) })
	return func() { t.Stop() }
}

// libexecDir finds the service binaries: $DEEPCODE_LIBEXEC, beside this
// executable, or in ../libexec/deepcode (distribution packages).
func libexecDir() (string, error) {
	candidates := []string{}
	if d := os.Getenv("DEEPCODE_LIBEXEC"); d != "" {
		candidates = append(candidates, d)
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, dir, filepath.Join(dir, "..", "libexec", "deepcode"), filepath.Join(dir, "..", "lib", "deepcode"))
	}
	for _, d := range candidates {
		if fi, err := os.Stat(filepath.Join(d, "deepcode-supervisor"+exeSuffix)); err == nil && fi.Mode().IsRegular() {
			return d, nil
		}
	}
	return "", errs.New(errs.StartFailed, "cannot find deepcode-supervisor beside %s or in ../libexec/deepcode: reinstall deepcode or set DEEPCODE_LIBEXEC", candidates)
}
