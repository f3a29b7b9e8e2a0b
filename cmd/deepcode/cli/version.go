package cli

import (
	"fmt"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/cobra"
)

// versionFlags gives root --version (-v) and --json, and makes root's RunE
// print the version when it is asked for before anything else (the TUI).
func (a *app) versionFlags(root *cobra.Command) {
	var show bool
	f := root.Flags()
	f.BoolVarP(&show, "version", "v", false, "print the version and exit (with --json: {version, commit, goVersion, os, arch})")
	f.BoolVar(&a.jsonOut, "json", false, "with --version: print the version as one JSON object")
	next := root.RunE
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if show {
			a.printVersion()
			return nil
		}
		if a.jsonOut {
			return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--json applies to --version, or to a command (see deepcode --help)")}
		}
		return next(cmd, args)
	}
}

func (a *app) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, commit, Go version and platform of this deepcode",
		Long: `Print the version of this deepcode: the release it was built as (set at
link time by make build from the git tag; "dev" otherwise), the commit it was
built from when the build recorded one, the Go version and the platform.

--json prints {"version","commit","goVersion","os","arch"} ("commit" is ""
when the build did not record one).`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a.printVersion()
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print one JSON object")
	return cmd
}

func (a *app) printVersion() {
	in := buildinfo.Get()
	if a.jsonOut {
		a.printJSON(in)
		return
	}
	fmt.Fprintln(a.stdout, in.String())
}
