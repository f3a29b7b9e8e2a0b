package config

import (
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/spf13/pflag"
)

var (
	builtinShell    = Profile{Provider: "exec", Command: platformShell(), ApprovalPolicy: "ask"}
	builtinScript   = Profile{Provider: "script", ApprovalPolicy: "ask"}
	builtinDeepcode = Profile{Provider: "deepcode", API: "chat", ApprovalPolicy: "ask"}
)

// platformShell is the built-in shell profile's command: the platform's
// shell, since Windows has no /bin/sh (it ran into PROVIDER_UNAVAILABLE).
func platformShell() []string {
	if runtime.GOOS == "windows" {
		return []string{"cmd.exe", "/d", "/s", "/c", "{prompt}"}
	}
	return []string{"/bin/sh", "-c", "{prompt}"}
}

// loadBody loads body as the file with an empty environment.
func loadBody(t *testing.T, body string) (*Config, string, error) {
	t.Helper()
	file := writeFile(t, body)
	c, err := Load(LoadOptions{File: file, Environ: []string{}})
	return c, file, err
}

func mustLoad(t *testing.T, body string) *Config {
	t.Helper()
	c, _, err := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBuiltinProfiles(t *testing.T) {
	d := Defaults()
	if want := map[string]Profile{"shell": builtinShell, "script": builtinScript, "deepcode": builtinDeepcode}; !reflect.DeepEqual(d.Profiles, want) {
		t.Fatalf("Defaults().Profiles = %+v, want %+v", d.Profiles, want)
	}
	c, err := Load(LoadOptions{Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]Profile{"shell": builtinShell, "script": builtinScript, "deepcode": builtinDeepcode} {
		p, ok := c.Profile(name)
		if !ok || !reflect.DeepEqual(p, want) {
			t.Errorf("Profile(%q) = %+v, %v; want %+v", name, p, ok, want)
		}
	}
	if p, ok := c.Profile("nope"); ok || !reflect.DeepEqual(p, Profile{}) {
		t.Errorf("Profile(nope) = %+v, %v; want zero, false", p, ok)
	}

	// Profile returns a copy; Defaults returns fresh maps.
	p, _ := c.Profile("shell")
	p.Command[0] = "/bin/evil"
	if c.Profiles["shell"].Command[0] != platformShell()[0] {
		t.Fatal("Profile shares Command with the Config")
	}
	d.Profiles["shell"] = Profile{}
	if Defaults().Profiles["shell"].Provider != "exec" {
		t.Fatal("Defaults shares its Profiles map")
	}
}

func TestDefaultProfile(t *testing.T) {
	c := mustLoad(t, "")
	if got := c.DefaultProfile(); got != "shell" {
		t.Fatalf("without a model: DefaultProfile() = %q, want shell", got)
	}
	c = mustLoad(t, "[profiles.deepcode]\nmodel = \"qwen3\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n")
	if got := c.DefaultProfile(); got != "deepcode" {
		t.Fatalf("with a model: DefaultProfile() = %q, want deepcode", got)
	}
	if p, _ := c.Profile("deepcode"); p.API != "chat" || p.Provider != "deepcode" {
		t.Fatalf("the file's [profiles.deepcode] lost the built-in settings: %+v", p)
	}
	c = mustLoad(t, "[profiles.deepcode]\nprovider = \"script\"\nmodel = \"x\"\n")
	if got := c.DefaultProfile(); got != "shell" {
		t.Fatalf("a deepcode profile turned into another provider: DefaultProfile() = %q, want shell", got)
	}
}

func TestFileAddsProfile(t *testing.T) {
	c := mustLoad(t, `
[profiles.fast]
provider = "exec"
command = ["my-agent", "--prompt", "{prompt}"]
env = { TOKEN = "s3cret" }
timeout = "10m"

[profiles.claude-2]
provider = "claude"
approval_policy = "never"
model = "opus"
timeout = "0s"
`)
	want := map[string]Profile{
		"shell":    builtinShell,
		"script":   builtinScript,
		"deepcode": builtinDeepcode,
		"fast": {Provider: "exec", Command: []string{"my-agent", "--prompt", "{prompt}"},
			Env: map[string]string{"TOKEN": "s3cret"}, ApprovalPolicy: "ask", Timeout: 10 * time.Minute},
		"claude-2": {Provider: "claude", ApprovalPolicy: "never", Model: "opus"},
	}
	if !reflect.DeepEqual(c.Profiles, want) {
		t.Fatalf("Profiles = %+v\nwant %+v", c.Profiles, want)
	}
	// Empty approval_policy counts as unset.
	c = mustLoad(t, "[profiles.x]\nprovider = \"script\"\napproval_policy = \"\"\n")
	if p, _ := c.Profile("x"); p.ApprovalPolicy != "ask" {
		t.Fatalf("approval_policy = %q, want ask", p.ApprovalPolicy)
	}
	// Empty tables are fine.
	c = mustLoad(t, "[profiles]\n")
	if !reflect.DeepEqual(c.Profiles, Defaults().Profiles) {
		t.Fatalf("got %+v", c.Profiles)
	}
}

func TestFileOverridesBuiltinProfile(t *testing.T) {
	t.Run("partially: set keys replace, others are kept", func(t *testing.T) {
		c := mustLoad(t, `
[profiles.shell]
command = ["/bin/bash", "-c", "{prompt}"]
timeout = "5m"
approval_policy = "auto"
`)
		want := Profile{Provider: "exec", Command: []string{"/bin/bash", "-c", "{prompt}"}, ApprovalPolicy: "auto", Timeout: 5 * time.Minute}
		if p, _ := c.Profile("shell"); !reflect.DeepEqual(p, want) {
			t.Fatalf("shell = %+v, want %+v", p, want)
		}
		if p, _ := c.Profile("script"); !reflect.DeepEqual(p, builtinScript) {
			t.Fatalf("script = %+v, untouched profile changed", p)
		}
	})

	t.Run("a list replaces the built-in list as a whole", func(t *testing.T) {
		c := mustLoad(t, "[profiles.shell]\ncommand = [\"sh\"]\n")
		if p, _ := c.Profile("shell"); !slices.Equal(p.Command, []string{"sh"}) {
			t.Fatalf("command = %q, want [sh]", p.Command)
		}
	})

	t.Run("wholly: set every setting it has", func(t *testing.T) {
		c := mustLoad(t, `
[profiles.shell]
provider = "opencode"
command = []
approval_policy = "never"
`)
		p, _ := c.Profile("shell")
		if p.Provider != "opencode" || len(p.Command) != 0 || p.ApprovalPolicy != "never" {
			t.Fatalf("shell = %+v", p)
		}
	})

	t.Run("overrides are validated", func(t *testing.T) {
		_, file, err := loadBody(t, "[profiles.shell]\ncommand = []\n")
		wantErr(t, err, errs.ConfigInvalid, "profiles.shell.command: the exec provider needs a command", "(set by "+file+")")
	})
}

func TestProfileUnknownKeys(t *testing.T) {
	_, file, err := loadBody(t, "[profiles.fast]\nprovider = \"exec\"\ncomand = [\"x\"]\n")
	wantErr(t, err, errs.ConfigInvalid,
		file+`: unknown key "profiles.fast.comand" (did you mean "profiles.fast.command"?)`,
		"known keys: agentd.idle_timeout", "profiles.<name>.command", "termhost.max_live")

	// A table inside a profile is one unknown key, named in full.
	_, _, err = loadBody(t, "[profiles.fast.options]\nx = 1\n")
	wantErr(t, err, errs.ConfigInvalid, `unknown key "profiles.fast.options"`)

	// A misspelt [profiles] table gets a hint too.
	_, _, err = loadBody(t, "[profile.fast]\nmodel = \"m\"\n")
	wantErr(t, err, errs.ConfigInvalid, `unknown key "profile.fast.model" (did you mean "profiles.fast.model"?)`)

	// Keys are case-sensitive here as well.
	_, _, err = loadBody(t, "[profiles.fast]\nProvider = \"exec\"\n")
	wantErr(t, err, errs.ConfigInvalid, `unknown key "profiles.fast.Provider" (did you mean "profiles.fast.provider"?)`)
}

func TestProfileTypeErrors(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string
	}{
		{"[profiles.x]\ncommand = \"ls\"", `profiles.x.command: expected a list of strings, got "ls"`},
		{"[profiles.x]\ncommand = [\"ls\", 1]", `profiles.x.command[1]: expected a string, got 1`},
		{"[profiles.x]\nargs = [true]", `profiles.x.args[0]: expected a string, got true`},
		{"[profiles.x]\nenv = { a = 1 }", `profiles.x.env.a: expected a string, got an integer`},
		{"[profiles.x]\nenv = { a = { b = \"c\" } }", `profiles.x.env.a: expected a string, got a table`},
		{"[profiles.x]\nenv = \"A=1\"", `profiles.x.env: expected a table of strings, got a string`},
		{"[profiles.x]\nenv = []", `profiles.x.env: expected a table of strings, got a list`},
		{"[profiles.x]\ntimeout = 5", `profiles.x.timeout: expected a duration such as "90s" or "5m", got 5`},
		{"[profiles.x]\ntimeout = \"5\"", `profiles.x.timeout: expected a duration such as "90s" or "5m", got "5"`},
		{"[profiles.x]\nprovider = 1", `profiles.x.provider: expected a string, got 1`},
		{"[profiles.x]\nmodel = [\"a\"]", `profiles.x.model: expected a string, got a list`},
		{`profiles = "shell"`, `profiles: expected a table of profiles, got "shell"`},
		{"[profiles]\nfast = \"exec\"", `profiles.fast: expected a table of settings, got "exec"`},
	} {
		_, file, err := loadBody(t, tc.body)
		wantErr(t, err, errs.ConfigInvalid, file+": "+tc.want, "fix the values in the file")
	}

	// Env values may be secrets: a bad one is described, never shown.
	_, _, err := loadBody(t, "[profiles.x]\nenv = { TOKEN = 987654321, LIST = [\"hunter2\"] }")
	wantErr(t, err, errs.ConfigInvalid, "profiles.x.env.LIST: expected a string, got a list", "profiles.x.env.TOKEN: expected a string, got an integer")
	if strings.Contains(err.Error(), "987654321") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows a secret env value: %v", err)
	}

	// Problems in several profiles are reported at once, in key order.
	_, _, err = loadBody(t, "[profiles.b]\ntimeout = 1\n[profiles.a]\ncommand = \"x\"\n")
	wantErr(t, err, errs.ConfigInvalid, "profiles.a.command: expected a list of strings")
	if msg := err.Error(); strings.Index(msg, "profiles.a.command") > strings.Index(msg, "profiles.b.timeout") {
		t.Fatalf("problems out of key order: %v", err)
	}
}

func TestProfileNames(t *testing.T) {
	for _, name := range []string{"a", "0", "fast", "my_agent-2", strings.Repeat("a", 64)} {
		if _, _, err := loadBody(t, "[profiles."+name+"]\nprovider = \"script\"\n"); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
	for _, tc := range []struct{ toml, key string }{
		{"Fast", "profiles.Fast"},
		{"-x", "profiles.-x"},
		{"_x", "profiles._x"},
		{strings.Repeat("a", 65), "profiles." + strings.Repeat("a", 65)},
		{`"a.b"`, `profiles."a.b"`},
		{`"my agent"`, `profiles."my agent"`},
		{`""`, `profiles.""`},
		{`"café"`, `profiles."café"`},
	} {
		_, file, err := loadBody(t, "[profiles."+tc.toml+"]\nprovider = \"script\"\n")
		wantErr(t, err, errs.ConfigInvalid, file+": "+tc.key+": ", "is not a valid profile name", "^[a-z0-9][a-z0-9_-]{0,63}$")
	}

	// Validate checks names of profiles built in code too.
	c := Defaults()
	c.Profiles["Bad"] = builtinScript
	wantErr(t, c.Validate(), errs.ConfigInvalid, `profiles.Bad: "Bad" is not a valid profile name`)
}

func TestValidateProfiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Profile
		want []string // nil = valid
	}{
		{"script", Profile{Provider: "script", ApprovalPolicy: "ask"}, nil},
		{"every provider", Profile{Provider: "opencode", ApprovalPolicy: "auto"}, nil},
		{"zero timeout means no limit", Profile{Provider: "codex", ApprovalPolicy: "never", Timeout: 0}, nil},
		{"positive timeout", Profile{Provider: "codex", ApprovalPolicy: "never", Timeout: time.Hour}, nil},
		{"exec with command", Profile{Provider: "exec", Command: []string{"true"}, ApprovalPolicy: "ask"}, nil},
		{"no provider", Profile{ApprovalPolicy: "ask"},
			[]string{"profiles.p.provider is not set; set it to one of exec, script, codex, claude, opencode, deepcode"}},
		{"bad provider", Profile{Provider: "gpt", ApprovalPolicy: "ask"},
			[]string{`profiles.p.provider: "gpt" is not allowed; use one of exec, script, codex, claude, opencode, deepcode`}},
		{"exec without command", Profile{Provider: "exec", ApprovalPolicy: "ask"},
			[]string{"profiles.p.command: the exec provider needs a command"}},
		{"exec with empty program", Profile{Provider: "exec", Command: []string{"", "x"}, ApprovalPolicy: "ask"},
			[]string{"profiles.p.command: the first element, the program to run, is empty"}},
		{"bad approval policy", Profile{Provider: "script", ApprovalPolicy: "always"},
			[]string{`profiles.p.approval_policy: "always" is not allowed; use one of ask, never, auto`}},
		{"unset approval policy", Profile{Provider: "script"}, []string{`profiles.p.approval_policy: "" is not allowed`}},
		{"negative timeout", Profile{Provider: "script", ApprovalPolicy: "ask", Timeout: -time.Second},
			[]string{"profiles.p.timeout: -1s is negative; use 0 or a positive duration"}},
		{"bad env name", Profile{Provider: "script", ApprovalPolicy: "ask", Env: map[string]string{"A=B": "x", "": "y"}},
			[]string{`profiles.p.env: "" is not a valid environment variable name`, `profiles.p.env: "A=B" is not a valid`}},
		{"NUL in env value", Profile{Provider: "script", ApprovalPolicy: "ask", Env: map[string]string{"K": "se\x00cret"}},
			[]string{"profiles.p.env.K: the value contains a NUL byte"}},
		{"deepcode", Profile{Provider: "deepcode", API: "anthropic", ApprovalPolicy: "ask", Sandbox: "workspace-write",
			ToolApproval: map[string]string{"shell": "never", "read_file": "ask"}}, nil},
		{"deepcode without api", Profile{Provider: "deepcode", ApprovalPolicy: "ask"},
			[]string{`profiles.p.api: "" is not a model API; set it to one of responses, chat, anthropic`}},
		{"deepcode bad tool approval", Profile{Provider: "deepcode", API: "chat", ApprovalPolicy: "ask",
			ToolApproval: map[string]string{"rm": "auto", "shell": "always"}},
			[]string{`profiles.p.tool_approval.rm: "rm" is not a tool`, `profiles.p.tool_approval.shell: "always" is not allowed; use one of ask, auto, never`}},
		{"deepcode bad sandbox", Profile{Provider: "deepcode", API: "chat", ApprovalPolicy: "ask", Sandbox: "strict"},
			[]string{`profiles.p.sandbox: "strict" is not a sandbox`}},
		{"several problems", Profile{Provider: "exec", ApprovalPolicy: "maybe", Timeout: -1},
			[]string{"profiles.p.approval_policy", "profiles.p.timeout", "profiles.p.command"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.Profiles["p"] = tc.p
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			wantErr(t, err, errs.ConfigInvalid, tc.want...)
			if strings.Contains(err.Error(), "cret") {
				t.Fatalf("error shows an env value: %v", err)
			}
		})
	}

	// Other durations stay strictly positive.
	c := Defaults()
	c.Agentd.IdleTimeout = 0
	wantErr(t, c.Validate(), errs.ConfigInvalid, "agentd.idle_timeout: 0s is not a positive duration")
}

func TestLoadValidatesProfiles(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"[profiles.fast]\nmodel = \"m\"", "profiles.fast.provider is not set"},
		{"[profiles.fast]\nprovider = \"exec\"", "profiles.fast.command: the exec provider needs a command"},
		{"[profiles.fast]\nprovider = \"gemini\"", `profiles.fast.provider: "gemini" is not allowed`},
		{"[profiles.fast]\nprovider = \"script\"\napproval_policy = \"yes\"", `profiles.fast.approval_policy: "yes" is not allowed; use one of ask, never, auto`},
		{"[profiles.fast]\nprovider = \"script\"\ntimeout = \"-1m\"", "profiles.fast.timeout: -1m0s is negative"},
	} {
		_, file, err := loadBody(t, tc.body)
		wantErr(t, err, errs.ConfigInvalid, tc.want, "(set by "+file+")")
	}
}

func TestProfilesNotFromEnvOrFlags(t *testing.T) {
	c, err := Load(LoadOptions{Environ: []string{
		"DEEPCODE_PROFILES=x",
		"DEEPCODE_PROFILES_SHELL=x",
		"DEEPCODE_PROFILES_SHELL_PROVIDER=bogus",
		"DEEPCODE_PROFILES_SHELL_COMMAND=rm -rf /",
		"DEEPCODE_PROFILES_FAST_PROVIDER=exec",
		"DEEPCODE_PROFILES_FAST_TIMEOUT=5",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*c, Defaults()) {
		t.Fatalf("got %+v, want defaults", *c)
	}

	// With a file, the environment still leaves profiles alone but sets the rest.
	file := writeFile(t, "[profiles.fast]\nprovider = \"script\"\n")
	c, err = Load(LoadOptions{File: file, Environ: []string{"DEEPCODE_PROFILES_FAST_PROVIDER=claude", "DEEPCODE_PORT=5000"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Profile("fast"); p.Provider != "script" || c.Port != 5000 {
		t.Fatalf("got %+v", *c)
	}

	// A flag cannot be mapped to a profile key.
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("provider", "", "")
	if err := fs.Parse([]string{"--provider", "exec"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"profiles.shell.provider", "profiles", "profiles.shell"} {
		_, err = Load(LoadOptions{Environ: []string{}, Flags: fs, FlagKeys: map[string]string{"provider": key}})
		wantErr(t, err, errs.Internal, "--provider", `"`+key+`"`)
	}
}

func TestProfileKeys(t *testing.T) {
	want := []string{
		"profiles.<name>.api",
		"profiles.<name>.approval_policy",
		"profiles.<name>.args",
		"profiles.<name>.base_url",
		"profiles.<name>.binary",
		"profiles.<name>.command",
		"profiles.<name>.context_budget",
		"profiles.<name>.credentials_file",
		"profiles.<name>.env",
		"profiles.<name>.max_output_tokens",
		"profiles.<name>.model",
		"profiles.<name>.network",
		"profiles.<name>.outside_workspace",
		"profiles.<name>.provider",
		"profiles.<name>.reasoning",
		"profiles.<name>.sandbox",
		"profiles.<name>.timeout",
		"profiles.<name>.tool_approval",
		"profiles.<name>.tool_timeout",
	}
	keys := ProfileKeys()
	if !slices.Equal(keys, want) {
		t.Fatalf("ProfileKeys() = %q, want %q", keys, want)
	}
	if n := reflect.TypeFor[Profile]().NumField(); len(keys) != n {
		t.Fatalf("%d profile keys for %d Profile fields", len(keys), n)
	}
	keys[0] = "mutated"
	if ProfileKeys()[0] != want[0] {
		t.Fatal("ProfileKeys() shares its slice with the caller")
	}

	// Keys and ProfileKeys are disjoint: Keys are what the environment sets.
	for _, k := range Keys() {
		if strings.HasPrefix(k, "profiles") {
			t.Errorf("Keys() lists %q", k)
		}
	}
	// EnvName is only a spelling: the variable it names for a profile key is
	// not read.
	for _, k := range ProfileKeys() {
		key := strings.Replace(k, "<name>", "shell", 1)
		env := EnvName(key)
		if !strings.HasPrefix(env, "DEEPCODE_PROFILES_SHELL_") {
			t.Errorf("EnvName(%q) = %q", key, env)
		}
		c, err := Load(LoadOptions{Environ: []string{env + "=x"}})
		if err != nil {
			t.Errorf("%s=x: %v", env, err)
		} else if !reflect.DeepEqual(*c, Defaults()) {
			t.Errorf("%s=x changed the configuration: %+v", env, *c)
		}
	}
}

func TestProfileSchema(t *testing.T) {
	// Every profile key round-trips through the file (see also
	// TestSchemaDecodesEveryKey) and the defaults decode to Defaults().
	tabs := tables()
	if len(tabs) != 1 || tabs[0].key != "profiles" {
		t.Fatalf("tables() = %+v", tabs)
	}
	if !tableByKey("profiles") || tableByKey("port") || tableByKey("profile") {
		t.Fatal("tableByKey")
	}
	got := defaultTables()["profiles"].(map[string]any)
	want := map[string]any{
		"shell":    map[string]any{"provider": "exec", "command": platformShell(), "approval_policy": "ask"},
		"script":   map[string]any{"provider": "script", "approval_policy": "ask"},
		"deepcode": map[string]any{"provider": "deepcode", "api": "chat", "approval_policy": "ask"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaultTables() = %#v", got)
	}
	for k, v := range map[string]string{"a": "p.a", "A_b-1": "p.A_b-1", "a.b": `p."a.b"`, "": `p.""`, "a b": `p."a b"`} {
		if got := joinKey("p", k); got != v {
			t.Errorf("joinKey(p, %q) = %s, want %s", k, got, v)
		}
	}
}

// validName is the hand-written form of namePattern: they agree.
func TestValidNameMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(namePattern)
	names := []string{"", "a", "0", "_", "-", "a_", "a-", "_a", "-a", "A", "aB", "codex", "my-profile_2",
		"é", "a b", "a.b", "a/b", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		"z9", "9z", "a--", "a__"}
	for _, n := range names {
		if got, want := validName(n), re.MatchString(n); got != want {
			t.Errorf("validName(%q) = %v, the pattern says %v", n, got, want)
		}
	}
}

func FuzzValidName(f *testing.F) {
	re := regexp.MustCompile(namePattern)
	f.Add("codex")
	f.Add("-x")
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := validName(n), re.MatchString(n); got != want {
			t.Errorf("validName(%q) = %v, the pattern says %v", n, got, want)
		}
	})
}
