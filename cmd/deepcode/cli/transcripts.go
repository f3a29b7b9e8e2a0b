package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/ids"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/spf13/cobra"
)

// Canonical transcripts, backups and rebuilds: `deepcode threads
// export|import` and `deepcode service backup|restore|verify|rebuild`.

func (a *app) threadsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "threads",
		Short: "Export and import threads' canonical transcripts",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.threadsExportCommand(), a.threadsImportCommand())
	return cmd
}

// maxTranscriptLine bounds one record read back (as agentd does).
const maxTranscriptLine = 64 << 20

// readTranscriptRecords parses a transcript, skipping the lines that are
// not whole records (a torn last line after a crash); it returns how many
// it skipped.
func readTranscriptRecords(r io.Reader) ([]api.TranscriptRecord, [][]byte, int, error) {
	var recs []api.TranscriptRecord
	var raws [][]byte
	skipped := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTranscriptLine)
	for sc.Scan() {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec api.TranscriptRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.Type == "" || rec.V > api.TranscriptVersion {
			skipped++
			continue
		}
		recs = append(recs, rec)
		raws = append(raws, append([]byte(nil), b...))
	}
	if err := sc.Err(); err != nil {
		return recs, raws, skipped, errs.Wrap(err, errs.InvalidParams, "reading the transcript: %v", err)
	}
	return recs, raws, skipped, nil
}

func (a *app) threadsExportCommand() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "export ID",
		Short: "Write a thread's canonical transcript to stdout (JSONL records, or Markdown to read)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if format != "jsonl" && format != "markdown" {
				return errs.New(errs.InvalidParams, "--format is jsonl or markdown, not %q", format)
			}
			id := args[0]
			if !ids.Valid("thr_", id) {
				return errs.New(errs.NotFound, "no thread %q: give a thread id (thr_…) as deepcode agents ls shows", id)
			}
			f, err := os.Open(filepath.Join(a.layout.SessionsDir(), id+".jsonl"))
			if errors.Is(err, fs.ErrNotExist) {
				return errs.New(errs.NotFound, "thread %s has no transcript in %s (threads older than transcripts have none)", id, a.layout.SessionsDir())
			}
			if err != nil {
				return errs.Wrap(err, errs.Internal, "opening the transcript of %s", id)
			}
			defer f.Close()
			recs, raws, skipped, err := readTranscriptRecords(f)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(a.stdout)
			if format == "jsonl" {
				for _, b := range raws {
					w.Write(b)
					w.WriteByte('\n')
				}
			} else {
				writeTranscriptMarkdown(w, recs)
			}
			if err := w.Flush(); err != nil {
				return errs.Wrap(err, errs.Internal, "writing the transcript")
			}
			if skipped > 0 {
				fmt.Fprintf(a.stderr, "deepcode: skipped %d line(s) that are not whole records (a write torn by a crash); deepcode service verify lists them\n", skipped)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "jsonl", "jsonl (the records, for threads import) or markdown")
	return cmd
}

// writeTranscriptMarkdown renders records for people.
func writeTranscriptMarkdown(w io.Writer, recs []api.TranscriptRecord) {
	text := func(raw json.RawMessage) string {
		var m struct {
			Text    string `json:"text"`
			Command string `json:"command"`
			Path    string `json:"path"`
			Action  string `json:"action"`
			Output  string `json:"output"`
		}
		_ = json.Unmarshal(raw, &m)
		return strings.TrimSpace(m.Text + m.Command + m.Path + " " + m.Action)
	}
	for _, r := range recs {
		at := r.At.Local().Format("2006-01-02 15:04:05")
		switch r.Type {
		case api.RecordThreadCreated:
			title := r.Thread.Title
			if title == "" {
				title = r.ThreadID
			}
			fmt.Fprintf(w, "# %s\n\n_%s · workspace %s · profile %s_\n\n", title, at, r.Thread.Workspace, r.Thread.Profile)
		case api.RecordThreadUpdated:
			if r.Thread != nil {
				fmt.Fprintf(w, "_%s · renamed to %q_\n\n", at, r.Thread.Title)
			}
		case api.RecordInput:
			if r.Input == nil {
				continue
			}
			label := "You"
			if r.Input.Submission == "steer" {
				label = "You (while the turn ran)"
			}
			fmt.Fprintf(w, "## %s · %s\n\n%s\n\n", label, at, r.Input.Text)
		case api.RecordItem:
			if r.Item == nil || r.Internal {
				continue
			}
			switch r.Item.Kind {
			case "agentMessage":
				fmt.Fprintf(w, "### Agent · %s\n\n%s\n\n", at, text(r.Item.Payload))
			default:
				fmt.Fprintf(w, "- %s: %s (%s)\n\n", r.Item.Kind, text(r.Item.Payload), r.Item.Status)
			}
		case api.RecordApprovalRequest:
			if r.Approval != nil {
				fmt.Fprintf(w, "- approval asked: %s\n\n", r.Approval.Summary)
			}
		case api.RecordApprovalResolved:
			if r.Approval != nil {
				fmt.Fprintf(w, "- approval %s\n\n", r.Approval.Decision)
			}
		case api.RecordTurnEnded:
			if r.Turn == nil {
				continue
			}
			line := fmt.Sprintf("_turn %s · %s", r.Turn.Status, at)
			if r.Turn.Error != nil {
				line += " · " + r.Turn.Error.Message
			}
			fmt.Fprintf(w, "%s_\n\n---\n\n", line)
		}
	}
}

func (a *app) threadsImportCommand() *cobra.Command {
	var workspace string
	var trust bool
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Create a thread from an exported transcript (new ids; keys and fingerprints kept)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			var r io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return errs.Wrap(err, errs.NotFound, "cannot read %s", args[0])
				}
				defer f.Close()
				r = f
			}
			recs, _, skipped, err := readTranscriptRecords(r)
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				return errs.New(errs.InvalidParams, "%s holds no transcript records (deepcode threads export ID writes them)", args[0])
			}
			p := api.ThreadImportParams{Records: recs, Trust: trust}
			if workspace != "" {
				ws, err := workspacePath(workspace)
				if err != nil {
					return err
				}
				p.Workspace = ws
			}
			b, err := a.business(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			var res api.ThreadResult
			if err := call(cmd.Context(), b, api.MethodThreadImport, p, &res); err != nil {
				return err
			}
			if a.jsonOut {
				a.printJSON(res)
				return nil
			}
			fmt.Fprintf(a.stdout, "imported %s (%d records", res.Thread.ID, len(recs))
			if skipped > 0 {
				fmt.Fprintf(a.stdout, ", %d torn line(s) skipped", skipped)
			}
			fmt.Fprintln(a.stdout, ")")
			return nil
		},
	}
	cmd.Flags().StringVar(&workspace, "workspace", "", "the workspace of the new thread (default: the transcript's)")
	cmd.Flags().BoolVar(&trust, "trust", false, "trust the workspace (recorded once)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the new thread as JSON")
	return cmd
}

// localCall makes one call of a local-surface method (shared/api) on a
// service's own socket, starting the instance if needed.
func (a *app) localCall(ctx context.Context, socket, method string, params, result any) error {
	if err := a.ensureRunning(ctx); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := rpc.Dial(dctx, rpc.DialOptions{Network: "unix", Address: a.layout.Socket(socket), Path: "/rpc", Timeout: 30 * time.Second})
	if err != nil {
		return errs.Wrap(err, errs.ServiceUnavailable, "cannot reach %s: is the service running? (deepcode service status)", socket)
	}
	peer := rpc.NewPeer(conn, rpc.PeerOptions{})
	done := make(chan struct{})
	go func() { defer close(done); _ = peer.Run() }()
	defer func() { peer.Close(rpc.CloseNormal, "done"); <-done }()
	if err := peer.Call(dctx, api.MethodInitialize, api.InitializeParams{ProtocolVersion: buildinfo.ProtocolVersion,
		ClientInfo: api.ClientInfo{Name: "deepcode", Version: "cli", Surface: "cli"}}, nil); err != nil {
		return err
	}
	return peer.Call(ctx, method, params, result)
}

func (a *app) backupCommand() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "backup --to FILE",
		Short: "Write a consistent, verified copy of the database and transcripts while the service runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if to == "" {
				return errs.New(errs.InvalidParams, "--to FILE is required: the backup file to create")
			}
			dst, err := filepath.Abs(to)
			if err != nil {
				return errs.Wrap(err, errs.InvalidParams, "bad --to %q", to)
			}
			if _, err := os.Lstat(dst); err == nil {
				return errs.New(errs.Conflict, "%s exists: give a new file name (a backup never overwrites)", dst)
			}
			stop := a.backupProgress(dst)
			var res api.StoreBackupResult
			err = a.localCall(cmd.Context(), paths.AgentdSocket, api.MethodStoreBackup, api.StoreBackupParams{Path: dst}, &res)
			stop()
			if err != nil {
				return err
			}
			if a.jsonOut {
				a.printJSON(res)
				return nil
			}
			fmt.Fprintf(a.stdout, "backup written to %s (%s, schema %d, integrity %s, %d threads, %d turns, %d transcripts)\n",
				res.Path, humanSize(res.Bytes), res.SchemaVersion, res.Integrity, res.Rows["threads"], res.Rows["turns"], res.Transcripts)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the backup file to create (it must not exist)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

// backupProgress shows, on a terminal, how much of the database the
// backup has copied (the size of the file agentd writes beside dst).
func (a *app) backupProgress(dst string) (stop func()) {
	f, ok := a.stderr.(*os.File)
	if a.jsonOut || a.quiet || !ok || !isTerminal(f.Fd()) {
		return func() {}
	}
	var total int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(a.layout.Database + suffix); err == nil {
			total += fi.Size()
		}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		shown := false
		for {
			select {
			case <-done:
				if shown {
					fmt.Fprint(a.stderr, "\r\033[K")
				}
				return
			case <-t.C:
				fi, err := os.Stat(dst + ".partial")
				if err != nil {
					continue
				}
				pct := 100.0
				if total > 0 {
					pct = min(100, float64(fi.Size())*100/float64(total))
				}
				fmt.Fprintf(a.stderr, "\rbacking up: %s of about %s (%.0f%%)", humanSize(fi.Size()), humanSize(total), pct)
				shown = true
			}
		}
	}()
	return func() { close(done); <-finished }
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// exitDisagreements is verify's exit status when it found disagreements.
const exitDisagreements = 4

func (a *app) verifyCommand() *cobra.Command {
	var thread string
	cmd := &cobra.Command{
		Use:   "verify [--thread ID]",
		Short: "Compare each thread's transcript with the database (exit 4 when they disagree)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			var res api.StoreVerifyResult
			if err := a.localCall(cmd.Context(), paths.AgentdSocket, api.MethodStoreVerify, api.StoreVerifyParams{ThreadID: thread}, &res); err != nil {
				return err
			}
			if a.jsonOut {
				a.printJSON(res)
			} else {
				for _, d := range res.Disagreements {
					where := d.ThreadID
					if d.ItemID != "" {
						where += " " + d.ItemID
					} else if d.TurnID != "" {
						where += " " + d.TurnID
					}
					fmt.Fprintf(a.stdout, "%s\t%s\t%s\n", d.Kind, where, d.Detail)
				}
				fmt.Fprintf(a.stdout, "%d threads, %d records checked: %d disagreement(s)\n", res.Threads, res.Records, len(res.Disagreements))
				if res.BackfillPending > 0 {
					fmt.Fprintf(a.stdout, "%d thread(s) older than transcripts still wait for theirs, written from the database in the background: check again shortly\n", res.BackfillPending)
				}
			}
			if len(res.Disagreements) > 0 {
				return &exitError{code: exitDisagreements}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&thread, "thread", "", "check one thread")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

// offline runs deepcode-agentd's offline command (rebuild, restore) and
// decodes its one JSON answer.
func (a *app) offline(ctx context.Context, result any, args ...string) error {
	dir, err := libexecDir()
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, filepath.Join(dir, "deepcode-agentd"+exeSuffix), args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	runErr := c.Run()
	if runErr != nil {
		var wire struct {
			Error struct {
				Code    errs.Code      `json:"code"`
				Message string         `json:"message"`
				Data    map[string]any `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal(bytes.TrimSpace(stderr.Bytes()), &wire) == nil && wire.Error.Code != "" {
			e := errs.New(wire.Error.Code, "%s", wire.Error.Message)
			e.Data = wire.Error.Data
			return e
		}
		return errs.Wrap(runErr, errs.Internal, "deepcode-agentd %s failed: %s", args[0], strings.TrimSpace(stderr.String()))
	}
	return json.Unmarshal(stdout.Bytes(), result)
}

// requireStopped refuses when the instance runs.
func (a *app) requireStopped(ctx context.Context, what string) error {
	if st, err := a.connectedStatus(ctx); err == nil && st.Phase != "" {
		return errs.New(errs.Conflict, "the service is running: %s needs it stopped (deepcode service stop)", what)
	}
	return nil
}

func (a *app) rebuildCommand() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "rebuild [--from DIR] --database NEW",
		Short: "Build a new database from the canonical transcripts (the service stopped)",
		Long: "Builds a new projection database (threads, turns, items, input receipts) from the transcripts in --from\n" +
			"(default: the sessions folder of the default instance) into the database that --database names, which\n" +
			"must not exist. Keys and fingerprints are kept; steer receipts read unknown; workspaces must be\n" +
			"trusted again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.database == "" {
				return errs.New(errs.InvalidParams, "--database NEW is required: the database file to create")
			}
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if err := a.requireStopped(cmd.Context(), "a rebuild"); err != nil {
				return err
			}
			args := []string{"rebuild", "--database", a.layout.Database}
			if from != "" {
				abs, err := filepath.Abs(from)
				if err != nil {
					return errs.Wrap(err, errs.InvalidParams, "bad --from %q", from)
				}
				args = append(args, "--from", abs)
			}
			stop := a.progress("rebuilding the database from the transcripts…")
			var res map[string]any
			err := a.offline(cmd.Context(), &res, args...)
			stop()
			if err != nil {
				return err
			}
			if a.jsonOut {
				a.printJSON(res)
				return nil
			}
			fmt.Fprintf(a.stdout, "rebuilt %v from %v: %v threads, %v records, %v events\n", res["database"], res["from"], res["threads"], res["records"], res["events"])
			if f, ok := res["findings"].([]any); ok && len(f) > 0 {
				fmt.Fprintf(a.stdout, "%d finding(s): run with --json to list them\n", len(f))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the folder of transcripts (default: the default instance's sessions folder)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) restoreCommand() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "restore --from FILE",
		Short: "Replace the database and transcripts with a backup's (the service stopped; the previous database is kept as .bak)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			if from == "" {
				return errs.New(errs.InvalidParams, "--from FILE is required: the backup to restore")
			}
			abs, err := filepath.Abs(from)
			if err != nil {
				return errs.Wrap(err, errs.InvalidParams, "bad --from %q", from)
			}
			if err := a.requireStopped(cmd.Context(), "a restore"); err != nil {
				return err
			}
			stop := a.progress("restoring…")
			var res map[string]any
			err = a.offline(cmd.Context(), &res, "restore", "--from", abs, "--database", a.layout.Database)
			stop()
			if err != nil {
				return err
			}
			if a.jsonOut {
				a.printJSON(res)
				return nil
			}
			fmt.Fprintf(a.stdout, "restored %v from %v (schema %v; the previous database is %v)\n", res["database"], res["from"], res["schemaVersion"], res["previous"])
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the backup file (deepcode service backup --to FILE wrote it)")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, "print the result as JSON")
	return cmd
}
