package cli

import (
	"slices"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/spf13/cobra"
)

// completeProfileFlags makes --profile complete from the configured profiles
// on every command that has the flag.
func (a *app) completeProfileFlags(cmd *cobra.Command) {
	if cmd.LocalNonPersistentFlags().Lookup("profile") != nil {
		// Only fails for a flag that does not exist or already has one.
		_ = cmd.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	}
	for _, c := range cmd.Commands() {
		a.completeProfileFlags(c)
	}
}

// completeProfiles lists the profiles of the loaded configuration (the
// built-in ones and config.toml's), each with its provider as the
// description. It only reads: no service is asked and nothing is created. A
// configuration that does not load completes nothing (the command itself
// then reports why).
func (a *app) completeProfiles(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	l, err := paths.Locate("", a.database)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	cfg, err := config.Load(config.LoadOptions{File: paths.ConfigFile(l.Home)})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var out []cobra.Completion
	for name, p := range cfg.Profiles {
		if strings.HasPrefix(name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(name, p.Provider))
		}
	}
	slices.Sort(out)
	return out, cobra.ShellCompDirectiveNoFileComp
}
