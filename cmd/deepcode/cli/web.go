package cli

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"time"

	"github.com/deepcode-dev/deepcode/shared/client"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
	"github.com/spf13/cobra"
)

// webLink is what `deepcode web --json` prints.
type webLink struct {
	URL        string `json:"url"`
	InstanceID string `json:"instanceId"`
	ExpiresIn  int    `json:"expiresIn"`
}

func (a *app) webCommand() *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Open the web client in the default browser (starting the service if needed)",
		Long: "Open the web client in the default browser with a single-use link that signs this browser in.\n" +
			"The link works once, within 60 seconds; the browser session then lasts 12 hours or until the\n" +
			"service restarts. With --no-open the link is printed instead.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.setup(cmd, nil); err != nil {
				return err
			}
			link, err := a.webLink(cmd.Context())
			if err != nil {
				return err
			}
			opened := false
			if !noOpen {
				if err := openBrowser(cmd.Context(), link.URL); err != nil {
					fmt.Fprintf(a.stderr, "deepcode: cannot open a browser (%v): open the link below within %d seconds\n", err, link.ExpiresIn)
				} else {
					opened = true
				}
			}
			switch {
			case a.jsonOut:
				a.printJSON(link)
			case opened:
				fmt.Fprintf(a.stdout, "opened the web client of instance %s in your browser\n", link.InstanceID)
			default:
				fmt.Fprintln(a.stdout, link.URL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "print the link instead of opening a browser")
	cmd.Flags().BoolVar(&a.jsonOut, "json", false, `print {"url","instanceId","expiresIn"} as JSON`)
	return cmd
}

// webLink converges on a running instance and issues a browser ticket
// through the management API.
func (a *app) webLink(ctx context.Context) (webLink, error) {
	st, _, err := a.start(ctx, startOptions{})
	if err != nil {
		return webLink{}, err
	}
	if st.Port == 0 {
		return webLink{}, errs.New(errs.ServiceUnavailable, "the service has no TCP port: see `deepcode service status`")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := client.Connect(cctx, a.layout, client.Options{})
	if err != nil {
		return webLink{}, err
	}
	defer m.Close()
	var t mgmt.TicketResult
	if err := m.Call(cctx, mgmt.MethodIssue, nil, &t); err != nil {
		return webLink{}, err
	}
	if t.InstanceID != st.InstanceID {
		return webLink{}, errs.New(errs.InstanceReplaced, "the service was replaced while issuing the link: run `deepcode web` again")
	}
	// The ticket travels in the fragment: browsers never send it to a
	// server, and the page removes it before exchanging it.
	return webLink{
		URL:        fmt.Sprintf("http://127.0.0.1:%d/#ticket=%s", st.Port, t.Ticket),
		InstanceID: t.InstanceID,
		ExpiresIn:  t.ExpiresIn,
	}, nil
}

// openBrowser hands url to the platform's default browser.
func openBrowser(ctx context.Context, url string) error {
	var name string
	var args []string
	switch runtime.GOOS {
	case "darwin":
		name, args = "open", []string{url}
	case "windows":
		// Not `cmd /c start`: cmd would interpret the URL's characters.
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	default:
		name, args = "xdg-open", []string{url}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return fmt.Errorf("%s not found", name)
	}
	cmd := exec.Command(path, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
		return nil
	case <-t.C:
		return nil // still running (some openers wait for the browser): it started
	case <-ctx.Done():
		return nil
	}
}
