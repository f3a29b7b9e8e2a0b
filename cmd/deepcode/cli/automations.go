package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/deepcode-dev/deepcode/cmd/internal/business"
	"github.com/deepcode-dev/deepcode/shared/api"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/cobra"
)

// automationView is the contract's automation with its last result
// decoded; --json prints the service's answer unchanged.
type automationView struct {
	api.Automation
	LastResult *runSummaryView `json:"lastResult"`
}

type runSummaryView struct {
	RunID       string     `json:"runId"`
	Status      string     `json:"status"`
	ScheduledAt time.Time  `json:"scheduledAt"`
	TurnID      string     `json:"turnId"`
	Error       *errs.Wire `json:"error"`
}

type runView struct {
	ID          string     `json:"id"`
	ScheduledAt time.Time  `json:"scheduledAt"`
	Trigger     string     `json:"trigger"`
	Status      string     `json:"status"`
	ThreadID    string     `json:"threadId"`
	TurnID      string     `json:"turnId"`
	Error       *errs.Wire `json:"error"`
	Missed      *struct {
		Count int `json:"count"`
	} `json:"missed"`
}

func (a *app) automationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "automations",
		Aliases: []string{"automation"},
		Short:   "Schedule prompts to run in the background on a cron schedule",
		Long: `Automations run a prompt in their own agent thread whenever a cron expression
matches, in a time zone, exactly once per occurrence, while the background
service runs (it is started when needed). An automation is named by its
exact id (auto_…).

Cron expressions have five fields (minute hour day-of-month month
day-of-week), or six with a leading seconds field, or are one of @yearly,
@monthly, @weekly, @daily, @hourly. Occurrences missed while the service was
stopped or draining are skipped, or run once with --missed run-once.

With --json every command prints the service's answer as one compact JSON
value; a failure prints {"error":{"code","message","retryable"}} and exits
non-zero.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.automationsAddCommand(), a.automationsListCommand(), a.automationsShowCommand(), a.automationsRemoveCommand(),
		a.automationsPauseCommand(true), a.automationsPauseCommand(false), a.automationsRunCommand(), a.automationsRunsCommand())
	return cmd
}

func (a *app) jsonFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the service's answer as JSON")
}

// automationCall makes one call and prints its answer raw with --json;
// otherwise it decodes it into out for the caller to print.
func (a *app) automationCall(cmd *cobra.Command, method string, params any, out any, human func()) error {
	return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
		var raw json.RawMessage
		if err := call(ctx, b, method, params, &raw); err != nil {
			return err
		}
		if a.jsonOut {
			fmt.Fprintln(a.stdout, string(raw))
			return nil
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return errs.Wrap(err, errs.Internal, "unexpected answer to %s", method)
			}
		}
		human()
		return nil
	})
}

func missedPolicy(v string) (string, error) {
	switch strings.ToLower(v) {
	case "", "skip":
		return "skip", nil
	case "run-once", "runonce", "once":
		return "runOnce", nil
	}
	return "", &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--missed must be skip or run-once, not %q", v)}
}

func (a *app) automationsAddCommand() *cobra.Command {
	var name, cron, zone, workspace, profile, missed string
	var trust bool
	cmd := &cobra.Command{
		Use:   "add --cron EXPR [flags] PROMPT...",
		Short: "Create an automation",
		Long: `Create an automation that runs PROMPT in a new agent thread of the workspace
whenever --cron matches in --tz (an IANA name such as Europe/Berlin; default
the machine's zone). "-" alone reads the prompt from stdin. Prints the new
automation's id and its next run.

Examples:
  deepcode automations add --cron "0 9 * * mon-fri" --tz Europe/Berlin --trust "summarise yesterday's commits"
  deepcode automations add --cron "*/30 * * * * *" --profile script "say tick"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(cron) == "" {
				return &exitError{code: exitUsage, err: errs.New(errs.UsageError, "--cron is required (for example --cron \"0 9 * * *\")")}
			}
			policy, err := missedPolicy(missed)
			if err != nil {
				return err
			}
			prompt, err := taskText(args, os.Stdin)
			if err != nil {
				return err
			}
			ws, err := workspacePath(workspace)
			if err != nil {
				return err
			}
			if name == "" {
				name = business.TitleOf(prompt)
			}
			params := map[string]any{"name": name, "cron": cron, "workspace": ws, "prompt": prompt, "missedRunPolicy": policy}
			if zone != "" {
				params["timeZone"] = zone
			}
			if profile != "" {
				params["profile"] = profile
			}
			if trust {
				params["trust"] = true
			}
			var res struct{ Automation automationView }
			return a.automationCall(cmd, api.MethodAutomationCreate, params, &res, func() {
				fmt.Fprintf(a.stdout, "%s %s\n", res.Automation.ID, nextText(res.Automation))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cron, "cron", "", "when to run: a cron expression (5 fields, or 6 with seconds first) or @daily, @hourly, …")
	f.StringVar(&zone, "tz", "", "the time zone the expression is read in, an IANA name (default: this machine's)")
	f.StringVar(&name, "name", "", "a name (default: the prompt's first line)")
	f.StringVar(&workspace, "workspace", "", "the workspace folder (default: the current directory)")
	f.StringVar(&profile, "profile", "", `the agent profile (default: "deepcode" once [profiles.deepcode] names a model, else "shell")`)
	f.StringVar(&missed, "missed", "skip", "occurrences missed while the service was stopped or draining: skip, or run-once (run the latest once)")
	f.BoolVar(&trust, "trust", false, "trust the workspace (an explicit grant, recorded once)")
	a.jsonFlag(cmd)
	return cmd
}

// nextText is "next <time in the automation's zone>", or why there is none.
func nextText(au automationView) string {
	switch {
	case !au.Enabled:
		return "paused"
	case au.NextFireAt == nil:
		return "never runs again"
	}
	return "next " + localTime(*au.NextFireAt, au.TimeZone)
}

func localTime(t time.Time, zone string) string {
	if loc, err := time.LoadLocation(zone); err == nil {
		t = t.In(loc)
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

func (a *app) automationsListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List automations",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				var all []json.RawMessage
				cursor := ""
				for {
					params := map[string]any{"limit": 200}
					if cursor != "" {
						params["cursor"] = cursor
					}
					var page struct {
						Automations []json.RawMessage `json:"automations"`
						NextCursor  string            `json:"nextCursor"`
					}
					if err := call(ctx, b, api.MethodAutomationList, params, &page); err != nil {
						return err
					}
					all = append(all, page.Automations...)
					if page.NextCursor == "" {
						break
					}
					cursor = page.NextCursor
				}
				if a.jsonOut {
					a.printJSON(map[string]any{"automations": nonNilRaw(all)})
					return nil
				}
				if len(all) == 0 {
					fmt.Fprintln(a.stdout, "no automations")
					return nil
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tNAME\tSCHEDULE\tTIME ZONE\tNEXT\tLAST")
				for _, raw := range all {
					var au automationView
					if err := json.Unmarshal(raw, &au); err != nil {
						return errs.Wrap(err, errs.Internal, "unexpected automation")
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", au.ID, au.Name, au.Cron, au.TimeZone, strings.TrimPrefix(nextText(au), "next "), lastText(au.LastResult))
				}
				return tw.Flush()
			})
		},
	}
	a.jsonFlag(cmd)
	return cmd
}

func nonNilRaw(s []json.RawMessage) []json.RawMessage {
	if s == nil {
		return []json.RawMessage{}
	}
	return s
}

func lastText(r *runSummaryView) string {
	if r == nil {
		return "-"
	}
	if r.Error != nil {
		return r.Status + " (" + string(r.Error.Code) + ")"
	}
	return r.Status
}

func (a *app) automationsShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show an automation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res struct{ Automation automationView }
			return a.automationCall(cmd, api.MethodAutomationRead, map[string]any{"automationId": args[0]}, &res, func() {
				au := res.Automation
				state := "enabled"
				if !au.Enabled {
					state = "paused"
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 1, ' ', 0)
				fmt.Fprintf(tw, "id:\t%s\n", au.ID)
				fmt.Fprintf(tw, "name:\t%s\n", au.Name)
				fmt.Fprintf(tw, "schedule:\t%s (%s)\n", au.Cron, au.TimeZone)
				fmt.Fprintf(tw, "state:\t%s, %s\n", state, nextText(au))
				fmt.Fprintf(tw, "missed runs:\t%s\n", au.MissedRunPolicy)
				fmt.Fprintf(tw, "workspace:\t%s\n", au.Workspace)
				fmt.Fprintf(tw, "profile:\t%s\n", au.Profile)
				fmt.Fprintf(tw, "thread:\t%s\n", au.ThreadID)
				if r := au.LastResult; r != nil {
					fmt.Fprintf(tw, "last run:\t%s %s %s\n", r.RunID, localTime(r.ScheduledAt, au.TimeZone), lastText(r))
				}
				fmt.Fprintf(tw, "revision:\t%d\n", au.Revision)
				_ = tw.Flush()
				fmt.Fprintf(a.stdout, "prompt:\n%s\n", strings.TrimSuffix(au.Prompt, "\n"))
			})
		},
	}
	a.jsonFlag(cmd)
	return cmd
}

func (a *app) automationsRemoveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete an automation and its run history",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.automationCall(cmd, api.MethodAutomationDelete, map[string]any{"automationId": args[0]}, nil, func() {
				fmt.Fprintf(a.stdout, "%s deleted\n", args[0])
			})
		},
	}
	a.jsonFlag(cmd)
	return cmd
}

func (a *app) automationsPauseCommand(pause bool) *cobra.Command {
	use, short, method := "pause ID", "Stop an automation from running until it is resumed", api.MethodAutomationPause
	if !pause {
		use, short, method = "resume ID", "Resume a paused automation (from now on: nothing missed while paused runs)", api.MethodAutomationResume
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var res struct{ Automation automationView }
			return a.automationCall(cmd, method, map[string]any{"automationId": args[0]}, &res, func() {
				fmt.Fprintf(a.stdout, "%s %s\n", res.Automation.ID, nextText(res.Automation))
			})
		},
	}
	a.jsonFlag(cmd)
	return cmd
}

// newRequestID is a fresh key for automation/run, kept for its retries.
func newRequestID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return "req_" + hex.EncodeToString(b)
}

// retryableWithKey: the outcome is unknown or the service could not take
// the request; the same key cannot run it twice.
func retryableWithKey(err error) bool {
	switch errs.CodeOf(err) {
	case errs.ConnectionLost, errs.ServiceUnavailable, errs.DaemonTimeout, errs.Overloaded:
		return true
	}
	return false
}

func (a *app) automationsRunCommand() *cobra.Command {
	var requestID string
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Run an automation now, once",
		Long: `Run the automation ID now, once, besides its schedule. The request is keyed
by --request-id (default: a fresh one): repeating the command with the same
key answers the same run instead of starting another. Prints the run's id,
status and turn.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if requestID == "" {
				requestID = newRequestID()
			}
			params := map[string]any{"automationId": args[0], "requestId": requestID}
			return a.withBusiness(cmd, func(ctx context.Context, b *client.Business) error {
				var raw json.RawMessage
				if err := call(ctx, b, api.MethodAutomationRun, params, &raw); err != nil {
					if e, ok := errs.As(err); ok && retryableWithKey(err) {
						e.Message += fmt.Sprintf(" (retry with --request-id %s: the same key cannot run it twice)", requestID)
					}
					return err
				}
				if a.jsonOut {
					fmt.Fprintln(a.stdout, string(raw))
					return nil
				}
				var res struct {
					Run       runView `json:"run"`
					Duplicate bool    `json:"duplicate"`
				}
				if err := json.Unmarshal(raw, &res); err != nil {
					return errs.Wrap(err, errs.Internal, "unexpected answer to %s", api.MethodAutomationRun)
				}
				line := res.Run.ID + " " + res.Run.Status
				if res.Run.TurnID != "" {
					line += " turn " + res.Run.TurnID
				}
				if res.Run.Error != nil {
					line += fmt.Sprintf(": %s (%s)", res.Run.Error.Message, res.Run.Error.Code)
				}
				if res.Duplicate {
					line += " (already requested with this key)"
				}
				fmt.Fprintln(a.stdout, line)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "the request's key, kept for retries (default: a fresh one)")
	a.jsonFlag(cmd)
	return cmd
}

func (a *app) automationsRunsCommand() *cobra.Command {
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:   "runs ID",
		Short: "Show an automation's runs, newest first, with their thread and turn",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			params := map[string]any{"automationId": args[0], "limit": limit}
			if cursor != "" {
				params["cursor"] = cursor
			}
			var res struct {
				Runs       []runView `json:"runs"`
				NextCursor string    `json:"nextCursor"`
			}
			return a.automationCall(cmd, api.MethodAutomationRuns, params, &res, func() {
				if len(res.Runs) == 0 {
					fmt.Fprintln(a.stdout, "no runs")
					return
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "RUN\tSCHEDULED (UTC)\tTRIGGER\tSTATUS\tTHREAD\tTURN\tNOTE")
				for _, r := range res.Runs {
					note := ""
					switch {
					case r.Error != nil:
						note = fmt.Sprintf("%s (%s)", r.Error.Message, r.Error.Code)
					case r.Missed != nil:
						note = fmt.Sprintf("stands for %d missed occurrences", r.Missed.Count)
					}
					turn := r.TurnID
					if turn == "" {
						turn = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.ScheduledAt.UTC().Format("2006-01-02 15:04:05"), r.Trigger, r.Status, r.ThreadID, turn, note)
				}
				_ = tw.Flush()
				if res.NextCursor != "" {
					fmt.Fprintf(a.stdout, "more: deepcode automations runs %s --cursor %s\n", args[0], res.NextCursor)
				}
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many runs to show (1-200)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue from a previous page")
	a.jsonFlag(cmd)
	return cmd
}
