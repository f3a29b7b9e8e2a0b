package windows

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestConfigGoldenAndRoundTrip(t *testing.T) {
	c, err := NewConfig(sampleTask())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "windows-task.json", b)
	dir := t.TempDir()
	if err := WriteConfig(dir, c); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		for _, p := range []string{ConfigPath(dir), ScriptPath(dir)} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v %v", p, fi, err)
			}
		}
	}
	script, _ := os.ReadFile(ScriptPath(dir))
	if string(script) != string(AdapterScript) {
		t.Fatal("the adapter on disk is not the embedded one")
	}
	back, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip:\n%+v\n%+v", back, c)
	}
	want := []string{`DEEPCODE_HOME=C:\Users\ada\.deepcode`, `PATH=C:\Windows\system32;C:\Windows;C:\Program Files\Git\cmd`}
	if !reflect.DeepEqual(back.Environ(), want) {
		t.Fatalf("environ %q", back.Environ())
	}
	if err := RemoveConfig(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfig(dir); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("after remove: %v", err)
	}
	if err := RemoveConfig(dir); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestConfigKeepsCredentialsOut(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
	t.Setenv("HTTPS_PROXY", "http://user:pw@proxy:3128")
	c, _ := NewConfig(sampleTask())
	b, _ := c.Marshal()
	for _, s := range []string{"sk-ant-secret", "proxy", "API_KEY"} {
		if strings.Contains(string(b), s) {
			t.Fatalf("configuration contains %q", s)
		}
	}
}

// The adapter is fixed: its text never depends on a task.
func TestAdapterScriptIsFixed(t *testing.T) {
	for _, want := range []string{"[ValidateSet('register', 'unregister', 'start', 'stop', 'query')]", "Register-ScheduledTask -TaskName $name -TaskPath $folder -Xml", "^deepcode-[a-z0-9]+$"} {
		if !strings.Contains(string(AdapterScript), want) {
			t.Errorf("adapter lacks %s", want)
		}
	}
}

func TestAdapterCommandLine(t *testing.T) {
	a := &Adapter{PowerShell: "powershell.exe", ServiceDir: filepath.Join("x", "my db.service")}
	cmd := a.Command(context.Background(), "register")
	want := []string{"powershell.exe", "-NoLogo", "-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass",
		"-File", filepath.Join("x", "my db.service", "deepcode-task.ps1"), "-Action", "register",
		"-ConfigPath", filepath.Join("x", "my db.service", "windows-task.json")}
	if !reflect.DeepEqual(cmd.Args, want) {
		t.Fatalf("args %q", cmd.Args)
	}
}
