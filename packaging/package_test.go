package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDebPackage builds the .deb with build.sh, installs it with dpkg -i,
// verifies the installed user units with systemd-analyze, runs deepcode
// --version and a service start/status/stop cycle from the installed files,
// and removes the package with dpkg -r, checking nothing is left behind. It
// changes the machine, so it runs only where asked (DEEPCODE_PACKAGE_TEST=1,
// as .ci/run does), as root, with dpkg.
func TestDebPackage(t *testing.T) {
	if os.Getenv("DEEPCODE_PACKAGE_TEST") != "1" {
		t.Skip("installs a .deb on this machine: set DEEPCODE_PACKAGE_TEST=1 (CI does) to run it")
	}
	if os.Geteuid() != 0 {
		t.Skip("dpkg -i needs root")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("dpkg is not installed")
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "deepcode").Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Skip("a deepcode package is already installed here: not replacing it")
	}
	for _, p := range []string{"/usr/bin/deepcode", "/usr/libexec/deepcode"} {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("%s exists outside dpkg: not overwriting it", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	dist := t.TempDir()
	build := exec.CommandContext(ctx, "bash", "build.sh")
	build.Env = append(os.Environ(), "FORMATS=deb", "DIST="+dist)
	run(t, build)
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("build.sh made %v", debs)
	}
	t.Logf("built %s", filepath.Base(debs[0]))

	run(t, exec.CommandContext(ctx, "dpkg", "-i", debs[0]))
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = exec.Command("dpkg", "-r", "deepcode").Run()
		}
	})

	listed := run(t, exec.CommandContext(ctx, "dpkg", "-L", "deepcode"))
	for _, want := range []string{
		"/usr/bin/deepcode",
		"/usr/libexec/deepcode/deepcode-supervisor", "/usr/libexec/deepcode/deepcode-manager",
		"/usr/libexec/deepcode/deepcode-gateway", "/usr/libexec/deepcode/deepcode-agentd",
		"/usr/libexec/deepcode/deepcode-termhost", "/usr/libexec/deepcode/deepcode-scheduler",
		"/usr/libexec/deepcode/deepcode-tui",
		"/usr/share/bash-completion/completions/deepcode",
		"/usr/share/zsh/vendor-completions/_deepcode",
		"/usr/share/fish/vendor_completions.d/deepcode.fish",
		"/usr/share/doc/deepcode/README.md",
		"/usr/share/doc/deepcode/copyright",
		"/usr/share/doc/deepcode/changelog.gz",
		"/usr/share/lintian/overrides/deepcode",
		"/usr/share/man/man1/deepcode.1.gz",
		"/usr/share/man/man1/deepcode-service-start.1.gz",
	} {
		if !containsLine(listed, want) {
			t.Errorf("the package does not install %s", want)
		}
	}
	if b, err := os.ReadFile("/usr/share/bash-completion/completions/deepcode"); err != nil || !strings.Contains(string(b), "__start_deepcode") {
		t.Errorf("bash completion: %v", err)
	}

	verifyUnits(ctx, t)

	version := strings.TrimSpace(run(t, exec.CommandContext(ctx, "/usr/bin/deepcode", "--version")))
	if version == "" {
		t.Fatal("deepcode --version printed nothing")
	}
	t.Logf("installed deepcode %s", version)

	serviceCycle(ctx, t)

	run(t, exec.CommandContext(ctx, "dpkg", "-r", "deepcode"))
	removed = true
	for _, p := range []string{"/usr/bin/deepcode", "/usr/libexec/deepcode", "/usr/share/bash-completion/completions/deepcode"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after dpkg -r", p)
		}
	}
	if units, _ := filepath.Glob("/usr/lib/systemd/user/deepcode*"); len(units) > 0 {
		t.Errorf("units left after dpkg -r: %v", units)
	}
}

// verifyUnits runs systemd-analyze --user verify on an instance of every
// installed template; any output on stderr fails (unknown keys only warn).
func verifyUnits(ctx context.Context, t *testing.T) {
	units, _ := filepath.Glob("/usr/lib/systemd/user/deepcode*")
	if len(units) == 0 {
		t.Log("the package has no systemd user units yet: nothing to verify")
		return
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("systemd-analyze is not installed: units not verified")
		return
	}
	var names []string
	for _, u := range units {
		names = append(names, strings.Replace(filepath.Base(u), "@.", "@pkgtest0000.", 1))
	}
	cmd := exec.CommandContext(ctx, "systemd-analyze", append([]string{"--user", "verify"}, names...)...)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir(), "HOME="+t.TempDir(), "SYSTEMD_LOG_COLOR=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(stderr.String()) != "" {
		t.Errorf("systemd-analyze --user verify %v: %v\n%s%s", names, err, out, stderr.String())
		return
	}
	t.Logf("systemd-analyze --user verify: %d installed units clean", len(names))
}

// serviceCycle starts, inspects and stops an instance with the installed
// deepcode in a temporary DEEPCODE_HOME, and checks that the supervisor ran
// from /usr/libexec/deepcode.
func serviceCycle(ctx context.Context, t *testing.T) {
	home := t.TempDir()
	rt, err := os.MkdirTemp("/tmp", "dcpkg")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(rt)
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + home, "DEEPCODE_HOME=" + filepath.Join(home, "dc"), "DEEPCODE_RUNTIME_DIR=" + rt}
	deepcode := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "/usr/bin/deepcode", args...)
		cmd.Env = env
		cmd.Dir = home
		return cmd
	}
	run(t, deepcode("service", "start", "--port", "0"))
	stopped := false
	defer func() {
		if !stopped {
			_ = deepcode("service", "stop", "--drain=false").Run()
		}
	}()
	out := run(t, deepcode("service", "status", "--json"))
	var st map[string]any
	if err := json.Unmarshal([]byte(lastLine(out)), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	t.Logf("status: %s", lastLine(out))
	if pid, ok := st["pid"].(float64); ok && pid > 0 {
		// `service start` may run a private copy of the installed binaries
		// (frozen runtime copies): same bytes as /usr/libexec/deepcode's.
		exe, err := os.Readlink("/proc/" + strconv.Itoa(int(pid)) + "/exe")
		if err != nil || !sameFile(exe, "/usr/libexec/deepcode/deepcode-supervisor") {
			t.Errorf("the instance's process runs %q (%v), not the installed supervisor", exe, err)
		} else {
			t.Logf("the instance runs %s, the installed supervisor", exe)
		}
	}
	run(t, deepcode("service", "stop"))
	stopped = true
	cmd := deepcode("service", "status")
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("status after stop: %v, want exit status 3 (not running)", err)
	}
}

func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), err, out, stderr.String())
	}
	return string(out)
}

func sameFile(a, b string) bool {
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
