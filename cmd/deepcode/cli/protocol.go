package cli

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/deepcode-dev/deepcode/docs"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
)

// schemaFile is the schema document's name.
const schemaFile = "protocol.schema.json"

func (a *app) protocolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "protocol",
		Short: "Describe the JSON-RPC protocol the services and clients speak",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.protocolSchemaCommand())
	return cmd
}

func (a *app) protocolSchemaCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "schema [--out DIR]",
		Short: "Print the protocol's JSON Schema (draft 2020-12), or write it to DIR/" + schemaFile,
		Long: `Print the JSON Schema (draft 2020-12) of every method's params and result and
every notification's params, generated from the Go types of the contract
(shared/api). Its "methods" and "notifications" members name, per method,
the definitions ($defs) of its params and result, the error codes it may
return beyond "commonErrors", whether it is served while the service drains,
and its retry policy. docs/` + schemaFile + ` in the repository is this output.

With --out DIR the schema is written to DIR/` + schemaFile + ` (atomically);
with --json that prints {"written":[path]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The committed document, which the contract's tests keep equal
			// to what shared/api/apischema generates: the CLI links no
			// generator (its start-up would pay for it on every call).
			b := docs.ProtocolSchema
			if out == "" {
				_, err := a.stdout.Write(b)
				return err
			}
			if fi, err := os.Stat(out); err != nil || !fi.IsDir() {
				return errs.New(errs.UsageError, "--out %s is not an existing folder: create it first", out)
			}
			path := filepath.Join(out, schemaFile)
			if err := fsutil.WriteFileAtomic(path, b, 0o644); err != nil {
				return errs.Wrap(err, errs.Internal, "cannot write %s: %v", path, err)
			}
			if a.jsonOut {
				a.printJSON(map[string][]string{"written": {path}})
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the schema into this folder instead of printing it")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `with --out, print {"written":[path]}`)
	return cmd
}
