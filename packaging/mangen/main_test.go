package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
	"github.com/spf13/cobra"
)

// TestPages writes the pages and checks there is one per command that is
// not hidden (named as man expects: deepcode-service-start.1), with the
// given version and date in the header, no cobra footer, and the same bytes
// from a second run.
func TestPages(t *testing.T) {
	dir := t.TempDir()
	if err := run([]string{"-dir", dir, "-version", "1.2.3", "-date", "2026-01-02"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	var want []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() {
			return
		}
		want = append(want, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cli.CommandTree())
	for _, p := range []string{"deepcode.1", "deepcode-service.1", "deepcode-service-start.1", "deepcode-completion-bash.1"} {
		if !contains(want, p) {
			t.Errorf("the command tree has no %s: %v", p, want)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d pages for %d commands", len(entries), len(want))
	}
	for _, p := range want {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Errorf("no page for a command: %v", err)
			continue
		}
		title := strings.ToUpper(strings.TrimSuffix(p, ".1"))
		if th := `.TH "` + title + `" "1" "Jan 2026" "deepcode 1.2.3" "deepcode manual"`; !bytes.Contains(b, []byte(th)) {
			t.Errorf("%s: no %s header:\n%.120s", p, th, b)
		}
		if bytes.Contains(b, []byte("Auto generated")) {
			t.Errorf("%s has cobra's footer", p)
		}
	}

	again := t.TempDir()
	if err := run([]string{"-dir", again, "-version", "1.2.3", "-date", "2026-01-02"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		a, _ := os.ReadFile(filepath.Join(dir, p))
		b, _ := os.ReadFile(filepath.Join(again, p))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", p)
		}
	}
}

// TestPagesRender runs man on each page, where man is installed: groff's
// warnings are what lintian reports as manpage-has-errors-from-man.
func TestPagesRender(t *testing.T) {
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("man is not installed")
	}
	dir := t.TempDir()
	if err := run([]string{"-dir", dir, "-version", "1.2.3"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(dir, "*.1"))
	for _, p := range pages {
		cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", p)
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man %s: %v %s", filepath.Base(p), err, stderr.String())
		}
	}
}

func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	for _, args := range [][]string{{}, {"-dir", t.TempDir(), "extra"}, {"-dir", t.TempDir(), "-date", "yesterday"}} {
		if err := run(args, &stderr); err == nil {
			t.Errorf("mangen %q: no error", args)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
