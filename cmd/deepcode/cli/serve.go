package cli

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/spf13/cobra"
)

func (a *app) serveCommand() *cobra.Command {
	var foreground bool
	var port int
	cmd := &cobra.Command{
		Use:   "serve --foreground",
		Short: "Run the whole service in the foreground, attached to this terminal (development, external supervisors)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !foreground {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError,
					"serve only runs in the foreground: pass --foreground, or use `deepcode service start` for a background service")}
			}
			if err := a.setup(cmd, map[string]string{"port": "port"}); err != nil {
				return err
			}
			dir, err := libexecDir()
			if err != nil {
				return err
			}
			args := []string{"--foreground", "--database", a.layout.Database}
			if cmd.Flags().Changed("port") {
				args = append(args, "--port", strconv.Itoa(port))
			}
			env := append(os.Environ(), paths.EnvHome+"="+a.layout.Home)
			return errs.Wrap(execSupervisor(filepath.Join(dir, "deepcode-supervisor"+exeSuffix), args, env),
				errs.StartFailed, "cannot run deepcode-supervisor")
		},
	}
	cmd.Flags().BoolVar(&foreground, "foreground", false, "run attached to this terminal (required)")
	cmd.Flags().IntVar(&port, "port", 3081, "TCP port on 127.0.0.1 (0 picks a free port)")
	return cmd
}
