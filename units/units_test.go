package units

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestQuoteExecPath(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/usr/libexec/deepcode/deepcode-manager", `":/usr/libexec/deepcode/deepcode-manager"`},
		{"/home/a b/bin/x", `":/home/a b/bin/x"`},
		{"/opt/100%/x", `":/opt/100%%/x"`},
		{"/opt/$HOME/x", `":/opt/$HOME/x"`}, // ":" turns substitution off: $ stays literal
		{"/opt/%i/x", `":/opt/%%i/x"`},
	} {
		got, err := QuoteExecPath(c.in)
		if err != nil || got != c.want {
			t.Errorf("QuoteExecPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"relative/x", "/a\nb", "/a\tb", "/a\x7fb", "/\xff", `/a"b`, `/a'b`, `/a\b`} {
		if _, err := QuoteExecPath(bad); err == nil {
			t.Errorf("QuoteExecPath(%q) accepted", bad)
		}
	}
	if got, _ := QuoteArg(`a $b %c "d"`); got != `"a $$b %%c \"d\""` {
		t.Errorf("QuoteArg = %s", got)
	}
}

func TestQuoteEnvValue(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/usr/bin:/bin", `"/usr/bin:/bin"`},
		{"a b", `"a b"`},
		{`$HOME "x" \ ` + "`", `"\$HOME \"x\" \\ \` + "`" + `"`},
		{"100%", `"100%"`}, // no specifiers in environment files
	} {
		got, err := QuoteEnvValue(c.in)
		if err != nil || got != c.want {
			t.Errorf("QuoteEnvValue(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := QuoteEnvValue("a\nb"); err == nil {
		t.Error("a newline was accepted")
	}
}

// weird is an instance whose paths hold every character that needs care.
func weird(root string) Instance {
	return Instance{
		DBID:     "abcdefgh2345",
		Database: filepath.Join(root, `db dir $HOME %i "q"`, "deepcode.sqlite3"),
		Home:     filepath.Join(root, "home 100%"),
		Libexec:  filepath.Join(root, `lib exec $USER %h ü`),
		Path:     "/usr/bin:/bin:" + filepath.Join(root, "my bin"),
		Port:     43081,
	}
}

// TestGolden pins the rendered per-instance files.
func TestGolden(t *testing.T) {
	in := weird("/root")
	var got bytes.Buffer
	drops, err := in.DropIns()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drops {
		got.WriteString("== " + d.Path + "\n")
		got.Write(d.Content)
	}
	env, err := in.Env()
	if err != nil {
		t.Fatal(err)
	}
	got.WriteString("== " + EnvFile(in.DBID) + "\n")
	got.Write(env)
	golden := filepath.Join("testdata", "instance.golden")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("rendered files differ from %s (go test ./units -update):\n%s", golden, got.Bytes())
	}
}

// TestContract keeps the templates in step with the services: every socket
// unit's FileDescriptorName is the name the service's activation looks for,
// its path is under %t/deepcode/%i, and every unit of an instance exists.
func TestContract(t *testing.T) {
	names := map[string]bool{}
	for _, n := range TemplateNames() {
		names[n] = true
	}
	for _, u := range InstanceUnits("x") {
		tmpl := strings.Replace(u, "@x.", "@.", 1)
		if !names[tmpl] {
			t.Errorf("no template %s", tmpl)
		}
	}
	target := string(Template("deepcode@.target"))
	for _, s := range Services {
		svc := string(Template("deepcode-" + s.Name + "@.service"))
		for _, k := range []string{"Type=notify", "Restart=on-failure", "WatchdogSec=", "PartOf=deepcode@%i.target", "ExecStart=:" + PackagedLibexec + "/deepcode-" + s.Name + "\n", "EnvironmentFile=%E/" + EnvFile("%i")} {
			if !strings.Contains(svc, k) {
				t.Errorf("%s lacks %q", s.Name, k)
			}
		}
		if s.OnDemand == strings.Contains(target, "deepcode-"+s.Name+"@%i.service") {
			t.Errorf("the target and %s disagree on whether it is on demand", s.Name)
		}
		if s.OnDemand && !strings.Contains(svc, "StartLimitIntervalSec=0") {
			t.Errorf("%s is re-activated when idle and needs StartLimitIntervalSec=0", s.Name)
		}
		for _, so := range s.Sockets {
			sock := string(Template("deepcode-" + so.Unit + "@.socket"))
			if !strings.Contains(sock, "FileDescriptorName="+so.FDName+"\n") || !strings.Contains(sock, "Service=deepcode-"+s.Name+"@%i.service") {
				t.Errorf("socket %s: wrong FileDescriptorName or Service", so.Unit)
			}
			if so.File != "" && !strings.Contains(sock, "ListenStream=%t/deepcode/%i/"+so.File+"\n") {
				t.Errorf("socket %s is not %%t/deepcode/%%i/%s", so.Unit, so.File)
			}
			if !strings.Contains(target, "deepcode-"+so.Unit+"@%i.socket") {
				t.Errorf("the target does not pull in socket %s", so.Unit)
			}
		}
	}
}

// unitTree writes the templates and weird's drop-ins into a private user
// configuration, with the service binaries as executables, and returns the
// environment for systemd-analyze.
func unitTree(t *testing.T) (env []string, in Instance) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("systemd units are Linux only")
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd); .ci/run installs it")
	}
	root := t.TempDir()
	in = weird(root)
	cfg := filepath.Join(root, "config")
	unitDir := filepath.Join(cfg, "systemd", "user")
	rt := filepath.Join(root, "rt")
	for _, d := range []string{unitDir, rt, in.Libexec, filepath.Dir(in.Database), filepath.Join(cfg, "deepcode", "instances")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range TemplateNames() {
		if err := os.WriteFile(filepath.Join(unitDir, n), Template(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	drops, err := in.DropIns()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drops {
		p := filepath.Join(unitDir, d.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, d.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	envFile, _ := in.Env()
	if err := os.WriteFile(filepath.Join(cfg, EnvFile(in.DBID)), envFile, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, s := range Services {
		if err := os.WriteFile(filepath.Join(in.Libexec, "deepcode-"+s.Name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env = append(os.Environ(), "XDG_RUNTIME_DIR="+rt, "XDG_CONFIG_HOME="+cfg, "SYSTEMD_LOG_COLOR=0")
	return env, in
}

// TestVerify runs systemd-analyze --user verify on every unit of an
// instance with awkward paths: any output on stderr (unknown keys, bad
// escaping, missing executables only warn) fails.
func TestVerify(t *testing.T) {
	env, in := unitTree(t)
	cmd := exec.Command("systemd-analyze", append([]string{"--user", "verify", "--man=no"}, InstanceUnits(in.DBID)...)...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("systemd-analyze verify: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
	}
	// The drop-in's executable is the one systemd will run.
	cmd = exec.Command("systemd-analyze", "--user", "cat-config", "--no-pager", "systemd/user/"+ServiceUnit("manager", in.DBID)+".d/"+DropInName)
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err == nil && !bytes.Contains(b, []byte(`lib exec $USER %%h ü`)) {
		t.Errorf("the drop-in does not carry the escaped path:\n%s", b)
	}
}

// maxExposure is the systemd-analyze security exposure every sandboxed
// service must stay under (0 = fully locked down, 10 = unprotected). The
// always-on services get the options that work in a user manager without
// user namespaces; agentd and termhost run the user's own tools and shells,
// so they are deliberately unsandboxed and are not held to it.
const maxExposure = 7.0

func TestSecurity(t *testing.T) {
	env, in := unitTree(t)
	for _, s := range Services {
		if s.OnDemand {
			continue
		}
		unit := ServiceUnit(s.Name, in.DBID)
		cmd := exec.Command("systemd-analyze", "--user", "security", "--offline=true", "--no-pager", "--threshold="+strconv.FormatFloat(maxExposure*10, 'f', 0, 64), unit)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: exposure above %.1f (%v):\n%s", unit, maxExposure, err, out)
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "Overall exposure level") {
				t.Logf("%s: %s", unit, strings.TrimSpace(l))
			}
		}
	}
}
