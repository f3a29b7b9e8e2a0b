package packaging

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The binaries lintian reports as statically-linked-binary, each overridden
// by packaging/lintian-overrides (static Go builds on purpose).
var staticBinaries = []string{
	"usr/bin/deepcode",
	"usr/libexec/deepcode/deepcode-agentd", "usr/libexec/deepcode/deepcode-gateway",
	"usr/libexec/deepcode/deepcode-manager", "usr/libexec/deepcode/deepcode-scheduler",
	"usr/libexec/deepcode/deepcode-supervisor", "usr/libexec/deepcode/deepcode-termhost",
	"usr/libexec/deepcode/deepcode-tui",
}

// knownOverrides are the other tags packaging/lintian-overrides covers, each
// exactly (tag and context): a new one still fails the test.
var knownOverrides = []string{
	"spelling-error-in-binary preceed precede [usr/libexec/deepcode/deepcode-tui]",
}

// lintianTag is one tag line of lintian's output: "E: deepcode: tag [context]"
// (O: for an overridden one).
var lintianTag = regexp.MustCompile(`^([EWIPXCO]): deepcode(?: [a-z]+)?: ([a-z0-9][a-z0-9+.-]*)(?: (.*))?$`)

// TestLintian builds the .deb (and the .rpm) with build.sh and runs lintian on
// the .deb at every level (errors, warnings, info, pedantic): any tag fails
// except statically-linked-binary, which the package's override must cover
// for each binary. Where rpm is installed it also checks the .rpm's licence.
// It skips without lintian.
func TestLintian(t *testing.T) {
	lintian, err := exec.LookPath("lintian")
	if err != nil {
		t.Skip("lintian is not installed (apt-get install lintian): the .deb is not checked")
	}
	if testing.Short() {
		t.Skip("builds the packages: not with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	dist := t.TempDir()
	build := exec.CommandContext(ctx, "bash", "build.sh")
	build.Env = append(os.Environ(), "FORMATS=deb rpm", "DIST="+dist)
	run(t, build)
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("build.sh made %v", debs)
	}

	cmd := exec.CommandContext(ctx, lintian, "--display-info", "--pedantic", "--show-overrides", "--tag-display-limit", "0", debs[0])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	// lintian exits 2 when it reports an error tag (the overridden ones too,
	// with --show-overrides): the tags are judged below. Any other failure
	// is lintian's own.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
		t.Fatalf("lintian: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Logf("lintian %s:\n%s", filepath.Base(debs[0]), stdout.String())
	bad, overridden := checkLintian(stdout.String())
	for _, l := range bad {
		t.Errorf("lintian: %s", l)
	}
	for _, b := range staticBinaries {
		if !slices.Contains(overridden, b) {
			t.Errorf("lintian did not report statically-linked-binary [%s] as overridden (%v): is packaging/lintian-overrides in the package?", b, overridden)
		}
	}

	checkRPM(ctx, t, dist)
}

// checkLintian returns the lines of lintian's output that are not the
// overridden statically-linked-binary tag or one of knownOverrides
// overridden (any other tag, overridden or not, and anything lintian
// printed that is no tag or note), and the files whose
// statically-linked-binary tag was overridden.
func checkLintian(out string) (bad, overridden []string) {
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "N: ") || l == "N:" {
			continue // blank, or a note: the override's justification
		}
		m := lintianTag.FindStringSubmatch(l)
		if m != nil && m[1] == "O" && m[2] == "statically-linked-binary" {
			overridden = append(overridden, strings.Trim(m[3], "[]"))
			continue
		}
		if m != nil && m[1] == "O" && slices.Contains(knownOverrides, m[2]+" "+m[3]) {
			continue
		}
		bad = append(bad, l)
	}
	return bad, overridden
}

func TestCheckLintian(t *testing.T) {
	out := `N: The binaries are static Go builds on purpose
O: deepcode: statically-linked-binary [usr/bin/deepcode]
E: deepcode: statically-linked-binary [usr/libexec/deepcode/deepcode-agentd]
W: deepcode: no-manual-page [usr/bin/deepcode]
I: deepcode: synopsis-is-a-sentence "Coding agents."
O: deepcode: extra-license-file [usr/share/doc/deepcode/LICENSE]
P: deepcode binary: something-pedantic
O: deepcode: spelling-error-in-binary preceed precede [usr/libexec/deepcode/deepcode-tui]
I: deepcode: spelling-error-in-binary preceed precede [usr/libexec/deepcode/deepcode-tui]
`
	bad, overridden := checkLintian(out)
	if want := []string{"usr/bin/deepcode"}; !slices.Equal(overridden, want) {
		t.Errorf("overridden = %v, want %v", overridden, want)
	}
	if len(bad) != 6 {
		t.Errorf("bad = %q, want the 6 lines that are no overridden statically-linked-binary or known override", bad)
	}
	if bad, overridden := checkLintian("\nN:\n"); len(bad)+len(overridden) != 0 {
		t.Errorf("empty output: bad %v, overridden %v", bad, overridden)
	}
}

// checkRPM checks the .rpm's licence field and that LICENSE is its licence
// file, where rpm is installed.
func checkRPM(ctx context.Context, t *testing.T, dist string) {
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(rpms) != 1 {
		t.Fatalf("build.sh made %v", rpms)
	}
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Log("rpm is not installed: the .rpm's licence is not checked")
		return
	}
	if got := run(t, exec.CommandContext(ctx, "rpm", "-qp", "--qf", "%{LICENSE}", rpms[0])); got != "Apache-2.0" {
		t.Errorf("the .rpm's License is %q, want Apache-2.0", got)
	}
	if got := strings.TrimSpace(run(t, exec.CommandContext(ctx, "rpm", "-qp", "--licensefiles", rpms[0]))); got != "/usr/share/licenses/deepcode/LICENSE" {
		t.Errorf("the .rpm's licence files: %q, want /usr/share/licenses/deepcode/LICENSE", got)
	}
}
