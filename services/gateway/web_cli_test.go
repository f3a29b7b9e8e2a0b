//go:build linux

package gateway_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/client/clienttest"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestDeepcodeWeb checks `deepcode web`: it opens the link with the
// platform opener (a stub xdg-open here), prints it with --no-open, and
// the link's single-use ticket signs a browser in exactly once.
func TestDeepcodeWeb(t *testing.T) {
	t.Parallel()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	stubs := t.TempDir()
	opened := filepath.Join(stubs, "opened")
	if err := os.WriteFile(filepath.Join(stubs, "xdg-open"), []byte("#!/bin/sh\nprintf '%s' \"$1\" > "+opened+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env.Extra = append(env.Extra,
		"PATH="+stubs+string(os.PathListSeparator)+env.Getenv("PATH"),
		"DEEPCODE_PORT=0", // the service `deepcode web` starts picks a free port
	)

	// Without a running service, `deepcode web` starts it.
	r := env.MustRun("web")
	in := clienttest.StartIn(t, env) // already running: converges on it
	if !strings.Contains(r.Stdout, "opened the web client of instance "+in.ID()) {
		t.Fatalf("deepcode web: %q", r.Stdout)
	}
	b, err := os.ReadFile(opened)
	if err != nil {
		t.Fatalf("xdg-open was not run: %v", err)
	}
	url := string(b)
	prefix := "http://" + in.Info.Address + "/#ticket="
	if !strings.HasPrefix(url, prefix) {
		t.Fatalf("opened %q, want %s…", url, prefix)
	}
	exchange := func(ticket string) int {
		h := http.Header{"Origin": {"http://" + in.Info.Address}, "Content-Type": {"application/json"}}
		body, _ := json.Marshal(map[string]string{"ticket": ticket})
		return in.TCP().Do(t, in.TCP().Client(t), http.MethodPost, "/auth/exchange", h, body).Status
	}
	ticket := strings.TrimPrefix(url, prefix)
	if st := exchange(ticket); st != http.StatusOK {
		t.Fatalf("exchanging the opened link's ticket: HTTP %d", st)
	}
	if st := exchange(ticket); st != http.StatusUnauthorized {
		t.Fatalf("exchanging it again: HTTP %d, want 401", st)
	}

	_ = os.Remove(opened)
	r = env.MustRun("web", "--no-open")
	if printed := strings.TrimSpace(r.Stdout); !strings.HasPrefix(printed, prefix) || strings.Contains(printed, "\n") {
		t.Fatalf("deepcode web --no-open printed %q", r.Stdout)
	}
	if _, err := os.Stat(opened); err == nil {
		t.Fatal("--no-open ran the opener")
	}
	var l struct {
		URL        string `json:"url"`
		InstanceID string `json:"instanceId"`
		ExpiresIn  int    `json:"expiresIn"`
	}
	env.MustRun("web", "--no-open", "--json").JSON(t, &l)
	if !strings.HasPrefix(l.URL, prefix) || l.InstanceID != in.ID() || l.ExpiresIn != 60 {
		t.Fatalf("deepcode web --json: %+v", l)
	}
	if st := exchange(strings.TrimPrefix(l.URL, prefix)); st != http.StatusOK {
		t.Fatalf("exchanging the --json link's ticket: HTTP %d", st)
	}
}
