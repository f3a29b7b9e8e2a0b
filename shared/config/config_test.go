package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// writeFile writes a config.toml in a fresh directory and returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantErr checks that err is a CONFIG_INVALID *errs.Error whose message
// contains every part.
func wantErr(t *testing.T, err error, code errs.Code, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s containing %q", code, parts)
	}
	var e *errs.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if e.Code != code {
		t.Fatalf("code = %s, want %s (%v)", e.Code, code, err)
	}
	for _, p := range parts {
		if !strings.Contains(e.Message, p) {
			t.Errorf("message %q does not contain %q", e.Message, p)
		}
	}
}

func flagSet(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.Int("port", 1111, "")
	fs.Duration("stop-timeout", 3*time.Second, "")
	fs.String("log-level", "error", "")
	fs.Int("unmapped", 0, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

var flagKeys = map[string]string{
	"port":         "port",
	"stop-timeout": "service.stop_timeout",
	"log-level":    "log.level",
}

func TestDefaultsOnly(t *testing.T) {
	c, err := Load(LoadOptions{Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if want := Defaults(); !reflect.DeepEqual(*c, want) {
		t.Fatalf("Load() = %+v, want defaults %+v", *c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	d := Defaults()
	if d.Port != 3081 || d.Log.Level != "info" || d.Service.StartTimeout != 15*time.Second ||
		d.Service.StopTimeout != 60*time.Second || d.Supervisor.RestartMinInterval != time.Second ||
		d.Supervisor.RestartMaxInterval != 10*time.Second || d.Agentd.IdleTimeout != 5*time.Minute ||
		d.Termhost.IdleTimeout != 5*time.Minute || d.Termhost.MaxLive != 8 || d.Termhost.MaxExited != 8 {
		t.Fatalf("unexpected defaults %+v", d)
	}
}

func TestMissingFileIsFine(t *testing.T) {
	c, err := Load(LoadOptions{File: filepath.Join(t.TempDir(), "nope", FileName), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 3081 {
		t.Fatalf("port = %d, want default", c.Port)
	}
}

func TestLayerPrecedence(t *testing.T) {
	file := writeFile(t, `
port = 4000
[service]
stop_timeout = "2m"
start_timeout = "20s"
[log]
level = "debug"
[termhost]
max_live = 3
`)
	environ := []string{
		"DEEPCODE_PORT=5000",
		"DEEPCODE_SERVICE_STOP_TIMEOUT=90s",
		"DEEPCODE_TERMHOST_MAX_EXITED=2",
	}

	t.Run("file over defaults", func(t *testing.T) {
		c, err := Load(LoadOptions{File: file, Environ: []string{}})
		if err != nil {
			t.Fatal(err)
		}
		if c.Port != 4000 || c.Service.StopTimeout != 2*time.Minute || c.Service.StartTimeout != 20*time.Second ||
			c.Log.Level != "debug" || c.Termhost.MaxLive != 3 {
			t.Fatalf("file not applied: %+v", *c)
		}
		if c.Termhost.MaxExited != 8 || c.Agentd.IdleTimeout != 5*time.Minute {
			t.Fatalf("defaults lost for keys the file does not set: %+v", *c)
		}
	})

	t.Run("env over file", func(t *testing.T) {
		c, err := Load(LoadOptions{File: file, Environ: environ})
		if err != nil {
			t.Fatal(err)
		}
		if c.Port != 5000 || c.Service.StopTimeout != 90*time.Second || c.Termhost.MaxExited != 2 {
			t.Fatalf("env not applied: %+v", *c)
		}
		if c.Service.StartTimeout != 20*time.Second || c.Log.Level != "debug" || c.Termhost.MaxLive != 3 {
			t.Fatalf("file values lost: %+v", *c)
		}
	})

	t.Run("set flags over env", func(t *testing.T) {
		fs := flagSet(t, "--port", "6000", "--stop-timeout", "7s")
		c, err := Load(LoadOptions{File: file, Environ: environ, Flags: fs, FlagKeys: flagKeys})
		if err != nil {
			t.Fatal(err)
		}
		if c.Port != 6000 || c.Service.StopTimeout != 7*time.Second {
			t.Fatalf("flags not applied: %+v", *c)
		}
		// --log-level was not given: its default "error" must not win over the file.
		if c.Log.Level != "debug" || c.Termhost.MaxExited != 2 {
			t.Fatalf("lower layers lost: %+v", *c)
		}
	})

	t.Run("env port zero picks a free port", func(t *testing.T) {
		c, err := Load(LoadOptions{Environ: []string{"DEEPCODE_PORT=0"}})
		if err != nil {
			t.Fatal(err)
		}
		if c.Port != 0 {
			t.Fatalf("port = %d, want 0", c.Port)
		}
	})
}

func TestFlagsOnlyWhenChanged(t *testing.T) {
	fs := flagSet(t) // nothing given
	c, err := Load(LoadOptions{Environ: []string{"DEEPCODE_PORT=5000"}, Flags: fs, FlagKeys: flagKeys})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 5000 || c.Service.StopTimeout != time.Minute || c.Log.Level != "info" {
		t.Fatalf("unset flag defaults leaked in: %+v", *c)
	}

	// A changed flag that is not in FlagKeys is not configuration.
	fs = flagSet(t, "--unmapped", "7", "--log-level", "warn")
	c, err = Load(LoadOptions{Environ: []string{}, Flags: fs, FlagKeys: flagKeys})
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "warn" || c.Port != 3081 {
		t.Fatalf("got %+v", *c)
	}

	// Setting a flag to its own default still counts: the user said so.
	fs = flagSet(t, "--port", "1111")
	c, err = Load(LoadOptions{Environ: []string{"DEEPCODE_PORT=5000"}, Flags: fs, FlagKeys: flagKeys})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 1111 {
		t.Fatalf("port = %d, want 1111 from the flag", c.Port)
	}
}

func TestFlagErrors(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("stop", "", "")
	if err := fs.Parse([]string{"--stop", "soon"}); err != nil {
		t.Fatal(err)
	}
	_, err := Load(LoadOptions{Environ: []string{}, Flags: fs, FlagKeys: map[string]string{"stop": "service.stop_timeout"}})
	wantErr(t, err, errs.ConfigInvalid, `flag --stop "soon"`, "expected a duration", "service.stop_timeout")

	_, err = Load(LoadOptions{Environ: []string{}, Flags: fs, FlagKeys: map[string]string{"stop": "service.stop"}})
	wantErr(t, err, errs.Internal, "--stop", `"service.stop"`)

	// Flag values are validated like any other layer, and the error says which flag.
	fs = flagSet(t, "--port", "70000")
	_, err = Load(LoadOptions{Environ: []string{}, Flags: fs, FlagKeys: flagKeys})
	wantErr(t, err, errs.ConfigInvalid, "port: 70000 is out of range", "set by --port")
}

func TestUnknownFileKeys(t *testing.T) {
	file := writeFile(t, "port = 1\n[foo]\nbar = 1\n")
	_, err := Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, file+`: unknown key "foo.bar"`, "known keys: agentd.idle_timeout")

	file = writeFile(t, "[service]\nstop_timout = \"5s\"\n")
	_, err = Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, FileName+`: unknown key "service.stop_timout" (did you mean "service.stop_timeout"?)`)

	// Keys are case-sensitive.
	file = writeFile(t, "Port = 1\n")
	_, err = Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, `unknown key "Port"`)

	// A key under a leaf is unknown; a scalar where a table belongs is a type error.
	file = writeFile(t, "[port]\nx = 1\n")
	_, err = Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, `unknown key "port.x"`)
	file = writeFile(t, "log = \"debug\"\n")
	_, err = Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, file+": log: expected a table of settings")

	// An empty table is fine.
	file = writeFile(t, "[service]\n[termhost]\n")
	if _, err := Load(LoadOptions{File: file, Environ: []string{}}); err != nil {
		t.Fatal(err)
	}
}

func TestFileTypeErrors(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string
	}{
		{`port = "abc"`, `port: expected an integer, got "abc"`},
		{`port = true`, `port: expected an integer, got true`},
		{`port = 1.5`, `port: expected an integer, got 1.5`},
		{`port = [1]`, `port: expected an integer, got a list`},
		{"[log]\nlevel = 3", `log.level: expected a string, got 3`},
		{"[service]\nstop_timeout = 90", `service.stop_timeout: expected a duration such as "90s" or "5m", got 90`},
		{"[service]\nstop_timeout = \"90\"", `service.stop_timeout: expected a duration such as "90s" or "5m", got "90"`},
		{"[termhost]\nmax_live = \"many\"", `termhost.max_live: expected an integer, got "many"`},
	} {
		file := writeFile(t, tc.body)
		_, err := Load(LoadOptions{File: file, Environ: []string{}})
		wantErr(t, err, errs.ConfigInvalid, file+": "+tc.want, "fix the values in the file")
	}

	// Whole numbers written as strings or floats are accepted.
	file := writeFile(t, "port = \"4001\"\n[termhost]\nmax_live = 4.0\n")
	c, err := Load(LoadOptions{File: file, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 4001 || c.Termhost.MaxLive != 4 {
		t.Fatalf("got %+v", *c)
	}
}

func TestFileSyntaxAndReadErrors(t *testing.T) {
	file := writeFile(t, "port = 1\nport = 2\n")
	_, err := Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, file+": not valid TOML: key port is already defined; fix the syntax")

	file = writeFile(t, "[service\n")
	_, err = Load(LoadOptions{File: file, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, file+":1:", "not valid TOML")

	dir := t.TempDir() // a directory is not a readable file
	_, err = Load(LoadOptions{File: dir, Environ: []string{}})
	wantErr(t, err, errs.ConfigInvalid, dir+": cannot read the configuration file")
}

func TestEnv(t *testing.T) {
	t.Run("bad values name the variable", func(t *testing.T) {
		_, err := Load(LoadOptions{Environ: []string{"DEEPCODE_PORT=eighty"}})
		wantErr(t, err, errs.ConfigInvalid, `environment variable DEEPCODE_PORT="eighty": expected an integer for port`, "fix or unset")

		_, err = Load(LoadOptions{Environ: []string{"DEEPCODE_SUPERVISOR_RESTART_MAX_INTERVAL=10"}})
		wantErr(t, err, errs.ConfigInvalid, `DEEPCODE_SUPERVISOR_RESTART_MAX_INTERVAL="10": expected a duration`)

		_, err = Load(LoadOptions{Environ: []string{"DEEPCODE_LOG_LEVEL=loud"}})
		wantErr(t, err, errs.ConfigInvalid, `log.level: "loud" is not allowed`, "set by DEEPCODE_LOG_LEVEL")
	})

	t.Run("other variables are ignored", func(t *testing.T) {
		c, err := Load(LoadOptions{Environ: []string{
			"DEEPCODE_HOME=/home/u/.deepcode",
			"DEEPCODE_LOG_STDERR=1",
			"DEEPCODE_SOMETHING_ELSE=x",
			"DEEPCODE_PORTS=1",
			"DEEPCODE_port=1",
			"PORT=1",
			"DEEPCODE_SERVICE=x",
			"NOEQUALS",
			"DEEPCODE_LOG_LEVEL=", // empty counts as unset
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*c, Defaults()) {
			t.Fatalf("got %+v, want defaults", *c)
		}
	})

	t.Run("nil Environ reads the process environment", func(t *testing.T) {
		t.Setenv("DEEPCODE_TERMHOST_MAX_LIVE", "5")
		c, err := Load(LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Termhost.MaxLive != 5 {
			t.Fatalf("max_live = %d, want 5", c.Termhost.MaxLive)
		}
	})
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"port 0", func(c *Config) { c.Port = 0 }, ""},
		{"port max", func(c *Config) { c.Port = 65535 }, ""},
		{"port too big", func(c *Config) { c.Port = 65536 }, "port: 65536 is out of range; use a value from 0 to 65535"},
		{"port negative", func(c *Config) { c.Port = -1 }, "port: -1 is out of range"},
		{"each level", func(c *Config) { c.Log.Level = "warn" }, ""},
		{"bad level", func(c *Config) { c.Log.Level = "INFO" }, `log.level: "INFO" is not allowed; use one of debug, info, warn, error`},
		{"empty level", func(c *Config) { c.Log.Level = "" }, `log.level: "" is not allowed`},
		{"zero duration", func(c *Config) { c.Service.StopTimeout = 0 }, `service.stop_timeout: 0s is not a positive duration; use a duration such as "1m0s"`},
		{"negative duration", func(c *Config) { c.Agentd.IdleTimeout = -time.Second }, "agentd.idle_timeout: -1s is not a positive duration"},
		{"zero start", func(c *Config) { c.Service.StartTimeout = 0 }, "service.start_timeout"},
		{"zero termhost idle", func(c *Config) { c.Termhost.IdleTimeout = 0 }, "termhost.idle_timeout"},
		{"zero restart min", func(c *Config) { c.Supervisor.RestartMinInterval = 0 }, "supervisor.restart_min_interval: 0s"},
		{"max_live 0", func(c *Config) { c.Termhost.MaxLive = 0 }, "termhost.max_live: 0 is too small; use 1 or more"},
		{"max_exited 0", func(c *Config) { c.Termhost.MaxExited = 0 }, "termhost.max_exited: 0 is too small"},
		{"max_live 1", func(c *Config) { c.Termhost.MaxLive = 1; c.Termhost.MaxExited = 1 }, ""},
		{"restart min > max", func(c *Config) { c.Supervisor.RestartMinInterval = time.Minute },
			"supervisor.restart_min_interval (1m0s) is greater than supervisor.restart_max_interval (10s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			wantErr(t, err, errs.ConfigInvalid, tc.want)
		})
	}

	// All problems are reported at once.
	c := Defaults()
	c.Port, c.Termhost.MaxLive = 70000, 0
	wantErr(t, c.Validate(), errs.ConfigInvalid, "port: 70000", "termhost.max_live: 0")
}

func TestKeysAndEnvName(t *testing.T) {
	want := []string{
		"agentd.idle_timeout",
		"agentd.lease_ttl",
		"agentd.max_runtimes",
		"agentd.runtime_idle_timeout",
		"log.level",
		"port",
		"service.start_timeout",
		"service.stop_timeout",
		"supervisor.restart_max_interval",
		"supervisor.restart_min_interval",
		"termhost.idle_timeout",
		"termhost.max_exited",
		"termhost.max_live",
	}
	keys := Keys()
	if !slices.Equal(keys, want) {
		t.Fatalf("Keys() = %q, want %q", keys, want)
	}
	keys[0] = "mutated"
	if Keys()[0] != want[0] {
		t.Fatal("Keys() shares its slice with the caller")
	}

	for key, env := range map[string]string{
		"port":                            "DEEPCODE_PORT",
		"service.stop_timeout":            "DEEPCODE_SERVICE_STOP_TIMEOUT",
		"supervisor.restart_min_interval": "DEEPCODE_SUPERVISOR_RESTART_MIN_INTERVAL",
		"termhost.max_live":               "DEEPCODE_TERMHOST_MAX_LIVE",
	} {
		if got := EnvName(key); got != env {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, env)
		}
	}

	// Every key has a default that differs from its zero value (a field
	// added without a default is caught here), and every key can be set
	// from its environment variable.
	defaults := defaultValues()
	for _, key := range Keys() {
		if reflect.ValueOf(defaults[key]).IsZero() {
			t.Errorf("key %s has no default in Defaults()", key)
		}
		val := "7"
		if fieldByKey()[key].typ == durationType {
			val = "7s"
		} else if key == "log.level" {
			val = "warn"
		}
		if _, err := Load(LoadOptions{Environ: []string{EnvName(key) + "=" + val}}); err != nil {
			t.Errorf("setting %s=%s: %v", EnvName(key), val, err)
		}
	}
}

func TestSchemaDecodesEveryKey(t *testing.T) {
	// Round trip: a file setting every key yields exactly those values.
	file := writeFile(t, `
port = 1234
[log]
level = "warn"
[service]
start_timeout = "1s"
stop_timeout = "2s"
[supervisor]
restart_min_interval = "3s"
restart_max_interval = "4s"
[agentd]
idle_timeout = "5s"
runtime_idle_timeout = "10s"
max_runtimes = 3
lease_ttl = "11s"
[termhost]
idle_timeout = "6s"
max_live = 7
max_exited = 9
[profiles.every]
provider = "codex"
command = ["c", "{prompt}"]
env = { A = "1", "B.C" = "2" }
binary = "/opt/codex"
args = ["--x", "y"]
base_url = "http://127.0.0.1:1/v1"
credentials_file = "/secret/creds"
model = "m"
reasoning = "high"
approval_policy = "never"
timeout = "8s"
`)
	c, err := Load(LoadOptions{File: file, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var want Config
	want.Port = 1234
	want.Log.Level = "warn"
	want.Service.StartTimeout, want.Service.StopTimeout = time.Second, 2*time.Second
	want.Supervisor.RestartMinInterval, want.Supervisor.RestartMaxInterval = 3*time.Second, 4*time.Second
	want.Agentd.IdleTimeout = 5 * time.Second
	want.Agentd.RuntimeIdleTimeout, want.Agentd.MaxRuntimes = 10*time.Second, 3
	want.Agentd.LeaseTTL = 11 * time.Second
	want.Termhost.IdleTimeout, want.Termhost.MaxLive, want.Termhost.MaxExited = 6*time.Second, 7, 9
	want.Profiles = Defaults().Profiles // the built-in profiles are always there
	want.Profiles["every"] = Profile{
		Provider: "codex", Command: []string{"c", "{prompt}"}, Env: map[string]string{"A": "1", "B.C": "2"},
		Binary: "/opt/codex", Args: []string{"--x", "y"}, BaseURL: "http://127.0.0.1:1/v1", CredentialsFile: "/secret/creds", Model: "m", Reasoning: "high",
		ApprovalPolicy: "never", Timeout: 8 * time.Second,
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got %+v\nwant %+v", *c, want)
	}
}

// TestLoadDefaultsFastPath: with nothing set, Load returns the defaults
// without merging, and they are exactly what the merge would give; a file
// with only an empty profile table still goes through the merge (the
// table exists, with no keys).
func TestLoadDefaultsFastPath(t *testing.T) {
	got, err := Load(LoadOptions{Environ: []string{"HOME=/nowhere", "DEEPCODE_HOME=/x"}})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := merge(nil, koanf.New("."), nil, "", nil, map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range merged.Profiles {
		if p.ApprovalPolicy == "" {
			p.ApprovalPolicy = defaultApprovalPolicy
			merged.Profiles[name] = p
		}
	}
	if !reflect.DeepEqual(*got, merged) {
		t.Fatalf("the defaults differ from their merge:\n%+v\n%+v", *got, merged)
	}
	if !empty(mustLayer(t, "")) || empty(mustLayer(t, "[profiles.x]\n")) {
		t.Fatal("an empty file must be empty and one with a table must not")
	}
}

func mustLayer(t *testing.T, text string) *koanf.Koanf {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := loadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if l == nil {
		return koanf.New(".")
	}
	return l
}
