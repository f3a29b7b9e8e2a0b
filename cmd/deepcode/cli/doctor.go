package cli

import (
	"fmt"
	"os"
	"sort"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/cobra"
)

// doctorOutput is what doctor prints with --json.
type doctorOutput struct {
	OK        bool          `json:"ok"`
	Manager   string        `json:"manager"`
	Installed bool          `json:"installed"`
	Database  string        `json:"database"`
	DBID      string        `json:"dbId"`
	Checks    []doctorCheck `json:"checks"`
	// ShellOnlyVariables names the credential and proxy variables set in
	// this shell that the managed service does not receive (names only).
	ShellOnlyVariables []string `json:"shellOnlyVariables"`
}

func (a *app) doctorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the login startup: units, service manager, session, executable and database (exit 1 on a failure)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			mgr, err := newServiceManager(a.layout)
			if err != nil {
				return err
			}
			rec, err := mgr.Installed()
			if errs.Is(err, errs.NotImplemented) {
				return err
			}
			out := doctorOutput{OK: true, Manager: mgr.Name(), Installed: rec != nil, Database: a.layout.Database, DBID: a.layout.DBID}
			if err != nil {
				out.Checks = append(out.Checks, doctorCheck{Name: "installed", Status: checkFail, Detail: errs.From(err).Message})
			} else {
				out.Checks = mgr.Doctor(cmd.Context(), rec)
			}
			vars := shellOnlyVariables(os.Environ())
			sort.Strings(vars)
			out.ShellOnlyVariables = append([]string{}, vars...)
			if len(vars) > 0 {
				out.Checks = append(out.Checks, doctorCheck{Name: "environment", Status: checkWarn,
					Detail: fmt.Sprintf("set in this shell but not passed to the managed service: %v; use deepcode's credential store, or configure the service's environment explicitly", vars)})
			}
			for _, c := range out.Checks {
				if c.Status == checkFail {
					out.OK = false
				}
			}
			if a.jsonOut {
				a.printJSON(out)
			} else {
				fmt.Fprintf(a.stdout, "deepcode service doctor: %s (database %s, id %s)\n", mgr.Name(), out.Database, out.DBID)
				for _, c := range out.Checks {
					fmt.Fprintf(a.stdout, "  %-4s  %-11s %s\n", c.Status, c.Name, c.Detail)
				}
			}
			if !out.OK {
				return &exitError{code: exitFailure}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the checks as JSON")
	return cmd
}
