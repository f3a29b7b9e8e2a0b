// Package cmd_test checks what each binary links, in the style of
// tailscale's tstest/deptest: the rules of docs/ARCHITECTURE.md that keep
// binaries small and services independent are tested, not hoped for.
package cmd_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/deepcode-dev/deepcode"

type listed struct {
	ImportPath string
	Deps       []string
	Imports    []string
}

// goList runs go list -json over patterns for GOOS (and CGO off, as the
// release builds).
func goList(t *testing.T, goos string, patterns ...string) []listed {
	t.Helper()
	args := append([]string{"list", "-json"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v (GOOS=%s): %v", patterns, goos, err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestBinariesDoNotLinkTheStore: the gateway, termhost, the manager and the
// CLI do not link SQLite or shared/store — what they need from the store
// they ask a service for, so their start and their memory stay small.
// shared/store/schema (the embedded migrations and the schema version the
// manager reports) links no driver and is allowed.
func TestBinariesDoNotLinkTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of every binary: not in -short")
	}
	isForbidden := func(dep string) bool {
		return dep == module+"/shared/store" || dep == "github.com/ncruces/go-sqlite3" ||
			strings.HasPrefix(dep, "github.com/ncruces/go-sqlite3/")
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, p := range goList(t, goos, "./deepcode", "./deepcode-gateway", "./deepcode-termhost", "./deepcode-manager") {
			for _, d := range p.Deps {
				if isForbidden(d) {
					t.Errorf("GOOS=%s: %s links %s", goos, p.ImportPath, d)
				}
			}
		}
	}
}

// TestCLIDoesNotLinkMarkdown: deepcode does not link the TUI's Markdown
// renderer — glamour and its syntax highlighter chroma, whose package
// init (styles and lexers registered) alone cost every command some 15 ms
// and 6 MB — which deepcode-tui links instead (and must: otherwise the
// pattern would be wrong and this test check nothing).
func TestCLIDoesNotLinkMarkdown(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of two binaries: not in -short")
	}
	isMarkdown := func(dep string) bool {
		for _, m := range []string{"github.com/charmbracelet/glamour", "github.com/alecthomas/chroma"} {
			if dep == m || strings.HasPrefix(dep, m+"/") {
				return true
			}
		}
		return false
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, p := range goList(t, goos, "./deepcode", "./deepcode-tui") {
			linked := 0
			for _, d := range p.Deps {
				if isMarkdown(d) {
					linked++
					if p.ImportPath == module+"/cmd/deepcode" {
						t.Errorf("GOOS=%s: %s links %s", goos, p.ImportPath, d)
					}
				}
			}
			if p.ImportPath == module+"/cmd/deepcode-tui" && linked == 0 {
				t.Errorf("GOOS=%s: %s links no glamour: the TUI has no Markdown renderer", goos, p.ImportPath)
			}
		}
	}
}

// TestCLIDoesNotLinkTUI: deepcode does not link the terminal UI's
// packages — bubbletea, bubbles, lipgloss, termenv and the clipboard
// (whose init scans PATH for xclip and its kin), whose package inits every
// command paid for at start-up, and bubbletea's asked the terminal for its
// background — which deepcode-tui, the TUI's binary, links instead (and
// must: otherwise the patterns would be wrong and this test check nothing).
func TestCLIDoesNotLinkTUI(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of two binaries: not in -short")
	}
	tuiModules := []string{
		"github.com/charmbracelet/bubbletea",
		"github.com/charmbracelet/bubbles",
		"github.com/charmbracelet/lipgloss",
		"github.com/muesli/termenv",
		"github.com/atotto/clipboard",
	}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, p := range goList(t, goos, "./deepcode", "./deepcode-tui") {
			linked := map[string]bool{}
			for _, d := range p.Deps {
				for _, m := range tuiModules {
					if d == m || strings.HasPrefix(d, m+"/") {
						linked[m] = true
						if p.ImportPath == module+"/cmd/deepcode" {
							t.Errorf("GOOS=%s: %s links %s", goos, p.ImportPath, d)
						}
					}
				}
			}
			if p.ImportPath == module+"/cmd/deepcode-tui" {
				for _, m := range tuiModules {
					if !linked[m] {
						t.Errorf("GOOS=%s: %s links no %s: the TUI is not where this test looks", goos, p.ImportPath, m)
					}
				}
			}
		}
	}
}

// TestServicesAreIndependent: no service imports another service's
// package, and shared/ imports no service — what two binaries share lives
// in shared/, and a service reaches another only over its socket.
func TestServicesAreIndependent(t *testing.T) {
	if testing.Short() {
		t.Skip("go list of every package: not in -short")
	}
	owner := func(path string) string {
		rest, ok := strings.CutPrefix(path, module+"/services/")
		if !ok {
			return ""
		}
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	checked := 0
	for _, p := range goList(t, "linux", "../...") {
		from := owner(p.ImportPath)
		isShared := strings.HasPrefix(p.ImportPath, module+"/shared/")
		for _, imp := range p.Imports {
			to := owner(imp)
			if to == "" {
				continue
			}
			if isShared {
				t.Errorf("%s (shared) imports the service package %s", p.ImportPath, imp)
			}
			if from != "" && from != to {
				t.Errorf("service %s imports service %s (%s → %s)", from, to, p.ImportPath, imp)
			}
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("go list found only %d packages: the pattern is wrong", checked)
	}
}
