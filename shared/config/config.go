// Package config loads deepcode's layered configuration.
//
// Every setting has a dotted key ("port", "service.stop_timeout") derived
// from the koanf tags of [Config]. A value is taken from the highest layer
// that sets it; the layers, lowest to highest, are:
//
//  1. the built-in defaults ([Defaults]);
//  2. the TOML file $DEEPCODE_HOME/config.toml ([LoadOptions.File]), where
//     "service.stop_timeout" is stop_timeout in a [service] table; a missing
//     file is the same as an empty one;
//  3. environment variables named by [EnvName]: DEEPCODE_ followed by the key
//     upper-cased with dots turned into underscores, e.g.
//     DEEPCODE_SERVICE_STOP_TIMEOUT=90s. Only names that belong to a known key
//     are read; other DEEPCODE_* variables (DEEPCODE_HOME, …) are not
//     configuration and are ignored. A variable set to the empty string counts
//     as unset;
//  4. command-line flags the user actually set (pflag's Changed), mapped to
//     keys by [LoadOptions.FlagKeys]. A flag's default never overrides a lower
//     layer.
//
// Mistakes are errors, never silently ignored: an unknown key in the file, a
// value of the wrong type (in the file, the environment or a flag) and a value
// out of range all make [Load] fail with an errs.ConfigInvalid error that names
// the file, variable or flag, the key, and what to do about it.
//
// Durations are Go durations written as strings ("90s", "5m", "1h30m"); a
// bare number is rejected rather than read as nanoseconds.
//
// # Profiles
//
// Agent profiles ([Profile]) are named tables in the file:
//
//	[profiles.review]
//	provider = "exec"
//	command = ["my-agent", "--prompt", "{prompt}"]
//	env = { MY_AGENT_TOKEN = "…" }
//	timeout = "10m"
//
// A name matches ^[a-z0-9][a-z0-9_-]{0,63}$. Profiles are set by the
// defaults and the file only: the environment and flags do not set them
// (DEEPCODE_PROFILES_* variables are not configuration and are ignored, like
// any other unknown DEEPCODE_* variable), so their keys are not in [Keys];
// [ProfileKeys] lists them with "<name>" standing for the profile's name. An
// unknown key or a value of the wrong type inside a profile is reported with
// its full key ("profiles.review.comand").
//
// The defaults hold the built-in profiles "shell", "script" and "deepcode". The file
// merges into them key by key, as koanf merges every layer: a
// [profiles.shell] table replaces the built-in value of each setting it sets
// (a list such as command as a whole) and keeps the built-in value of each
// setting it omits; an env table would merge variable by variable, but no
// built-in profile sets env. To replace a built-in profile wholly, set every
// setting it has, e.g. command = [] when turning shell into another
// provider. Built-in profiles cannot be removed. After loading, a profile
// that leaves approval_policy unset (or empty) gets "ask".
//
// # Adding a setting
//
// Add a field with a koanf tag to Config (inside the struct of its section)
// and its default to [Defaults]. The key, its environment variable, the
// unknown-key check and the type check follow from the struct by reflection.
// Range checks come from optional tags read by [Config.Validate]: min:"1",
// max:"65535" on integers and oneof:"a b c" on strings; durations must be
// positive unless tagged min:"0", which allows zero. Fields of a named table
// (Profile) may also be lists and string tables, and take required:"true"
// (must be set) and secret:"true" (the value never appears in messages).
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/toml/v2"
	"github.com/knadh/koanf/providers/confmap"
	env "github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	gotoml "github.com/pelletier/go-toml/v2"
	"github.com/spf13/pflag"
)

// FileName is the name of the configuration file inside $DEEPCODE_HOME.
const FileName = "config.toml"

// EnvPrefix starts the name of every configuration environment variable.
const EnvPrefix = "DEEPCODE_"

// Config is deepcode's whole configuration. The koanf tags are the keys.
type Config struct {
	// Port is the gateway's TCP port on 127.0.0.1; 0 picks a free port.
	Port int `koanf:"port" min:"0" max:"65535"`
	Log  struct {
		// Level is the lowest level logged: debug, info, warn or error.
		Level string `koanf:"level" oneof:"debug info warn error"`
	} `koanf:"log"`
	Service struct {
		// StartTimeout bounds how long a start waits for the service to be ready.
		StartTimeout time.Duration `koanf:"start_timeout"`
		// StopTimeout is the drain/stop deadline.
		StopTimeout time.Duration `koanf:"stop_timeout"`
	} `koanf:"service"`
	Supervisor struct {
		// RestartMinInterval is the first delay before restarting a crashed child.
		RestartMinInterval time.Duration `koanf:"restart_min_interval"`
		// RestartMaxInterval caps the delay between restarts of a crashing child.
		RestartMaxInterval time.Duration `koanf:"restart_max_interval"`
	} `koanf:"supervisor"`
	Agentd struct {
		// IdleTimeout is how long agentd stays up with nothing to do.
		IdleTimeout time.Duration `koanf:"idle_timeout"`
		// RuntimeIdleTimeout is how long a warm agent runtime (codex,
		// claude, opencode) is kept for its thread's next turn.
		RuntimeIdleTimeout time.Duration `koanf:"runtime_idle_timeout"`
		// MaxRuntimes is the most warm agent runtimes kept at once.
		MaxRuntimes int `koanf:"max_runtimes" min:"1"`
		// LeaseTTL is how long the runtime-owner lease lasts unrenewed
		// (renewed every third of it): how long a hung agentd on another
		// machine sharing the file would block a new one. A crashed agentd
		// on this machine is taken over at once (the runtime lock).
		LeaseTTL time.Duration `koanf:"lease_ttl"`
	} `koanf:"agentd"`
	Termhost struct {
		// IdleTimeout is how long termhost stays up with no terminals.
		IdleTimeout time.Duration `koanf:"idle_timeout"`
		// MaxLive is the most terminals running at once.
		MaxLive int `koanf:"max_live" min:"1"`
		// MaxExited is the most exited terminals whose output is kept.
		MaxExited int `koanf:"max_exited" min:"1"`
	} `koanf:"termhost"`
	// Profiles are the agent profiles by name, [profiles.<name>] in the file.
	// Only the defaults and the file set them; see the package documentation.
	Profiles map[string]Profile `koanf:"profiles"`
}

// Profile configures how agentd runs turns for threads that name it.
type Profile struct {
	// Provider is the runtime: exec (a command line), script (deterministic, for tests and demos), codex, claude, opencode, or deepcode (agentd's own agent, speaking a model API itself).
	Provider string `koanf:"provider" oneof:"exec script codex claude opencode deepcode" required:"true"`
	// Command is the exec provider's argv. An element "{prompt}" is replaced by the prompt; without one the prompt goes to stdin.
	Command []string `koanf:"command"`
	// Env adds environment variables for the runtime (never logged).
	Env map[string]string `koanf:"env" secret:"true"`
	// Binary overrides the runtime's executable (codex, claude, opencode).
	Binary string `koanf:"binary"`
	// Args are extra arguments for the runtime.
	Args []string `koanf:"args"`
	// BaseURL points the runtime at another model endpoint (an
	// OpenAI-compatible or Anthropic base URL, e.g. http://127.0.0.1:8080/v1).
	BaseURL string `koanf:"base_url"`
	// CredentialsFile is a private (0600) file of KEY=VALUE lines added to
	// the runtime's environment only (e.g. OPENAI_API_KEY=…).
	CredentialsFile string `koanf:"credentials_file"`
	Model           string `koanf:"model"`
	Reasoning       string `koanf:"reasoning"`
	// ApprovalPolicy: "ask" (default; approvals wait for a client, denied when the turn is non-interactive), "never" (deny every request), "auto" (approve every request).
	ApprovalPolicy string `koanf:"approval_policy" oneof:"ask never auto"`
	// Timeout bounds one turn; 0 means no limit.
	Timeout time.Duration `koanf:"timeout" min:"0"`

	// The deepcode provider's settings (see docs/PROVIDERS.md).

	// API is the model API the deepcode provider speaks: "responses"
	// (OpenAI Responses), "chat" (OpenAI-compatible Chat Completions, what
	// local model servers speak) or "anthropic" (Anthropic Messages).
	API string `koanf:"api"`
	// ContextBudget is the most tokens (estimated) of conversation sent to
	// the model; older turns are left out beyond it. 0: 100000.
	ContextBudget int `koanf:"context_budget" min:"0"`
	// MaxOutputTokens bounds one model answer (Anthropic requires a bound). 0: 8192.
	MaxOutputTokens int `koanf:"max_output_tokens" min:"0"`
	// ToolApproval sets the approval policy of single tools (shell,
	// read_file, write_file, edit, list, glob, grep): "ask", "auto" or
	// "never". Tools not named follow approval_policy, except the read-only
	// ones, which need no approval.
	ToolApproval map[string]string `koanf:"tool_approval"`
	// ToolTimeout bounds one shell tool call. 0: 10 minutes.
	ToolTimeout time.Duration `koanf:"tool_timeout" min:"0"`
	// Sandbox "workspace-write" lets the shell tool's processes write only
	// in the workspace and the temporary folder (Linux Landlock, best
	// effort), with no network unless Network is set. "" runs them
	// unsandboxed.
	Sandbox string `koanf:"sandbox"`
	// Network allows the sandboxed shell tool network access.
	Network bool `koanf:"network"`
	// OutsideWorkspace lets the file tools use paths outside the workspace.
	OutsideWorkspace bool `koanf:"outside_workspace"`
}

// APIs are the model APIs of the deepcode provider.
var APIs = []string{"responses", "chat", "anthropic"}

// Tools are the deepcode provider's tools, as tool_approval names them.
var Tools = []string{"shell", "read_file", "write_file", "edit", "list", "glob", "grep"}

// DefaultProfile is the profile of a thread that names none: the built-in
// "deepcode" profile once a model is configured for it
// ([profiles.deepcode] model = "…"), else "shell".
func (c *Config) DefaultProfile() string {
	if p, ok := c.Profiles["deepcode"]; ok && p.Provider == "deepcode" && p.Model != "" {
		return "deepcode"
	}
	return "shell"
}

// defaultApprovalPolicy is a loaded profile's approval policy when it sets none.
const defaultApprovalPolicy = "ask"

// namePattern is what a profile's name must match (validName checks it: a
// compiled regexp with {0,63} costs every deepcode command hundreds of
// allocations at start-up, for a check most commands never make).
const namePattern = `^[a-z0-9][a-z0-9_-]{0,63}$`

func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Profile returns the profile called name and whether there is one. The
// result is a copy: changing its Command, Args or Env does not change c.
func (c *Config) Profile(name string) (Profile, bool) {
	p, ok := c.Profiles[name]
	if !ok {
		return Profile{}, false
	}
	p.Command = slices.Clone(p.Command)
	p.Args = slices.Clone(p.Args)
	p.Env = maps.Clone(p.Env)
	p.ToolApproval = maps.Clone(p.ToolApproval)
	return p, true
}

// check is the cross-field validation of one profile; prefix is its key,
// "profiles.<name>". Field ranges are checked from the tags by validate.
func (p Profile) check(prefix string) []issue {
	var out []issue
	if p.Provider == "exec" {
		key := prefix + ".command"
		switch {
		case len(p.Command) == 0:
			out = append(out, issue{key, fmt.Sprintf(
				`%s: the exec provider needs a command; set it to the program and its arguments, e.g. ["/bin/sh", "-c", "{prompt}"]`, key)})
		case p.Command[0] == "":
			out = append(out, issue{key, fmt.Sprintf("%s: the first element, the program to run, is empty; name the program", key)})
		}
	}
	if p.Provider == "deepcode" {
		out = append(out, p.checkNative(prefix)...)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Env)) {
		key := joinKey(prefix+".env", name)
		if name == "" || strings.ContainsAny(name, "=\x00") {
			out = append(out, issue{key, fmt.Sprintf(`%s.env: %q is not a valid environment variable name; use a non-empty name without "=" or NUL`, prefix, name)})
		}
		// The value is never shown: it may be a secret.
		if strings.ContainsRune(p.Env[name], 0) {
			out = append(out, issue{key, fmt.Sprintf("%s: the value contains a NUL byte, which an environment variable cannot hold", key)})
		}
	}
	return out
}

// checkNative checks the deepcode provider's settings.
func (p Profile) checkNative(prefix string) []issue {
	var out []issue
	if !slices.Contains(APIs, p.API) {
		key := prefix + ".api"
		out = append(out, issue{key, fmt.Sprintf("%s: %q is not a model API; set it to one of %s", key, p.API, strings.Join(APIs, ", "))})
	}
	for _, tool := range slices.Sorted(maps.Keys(p.ToolApproval)) {
		key := joinKey(prefix+".tool_approval", tool)
		if !slices.Contains(Tools, tool) {
			out = append(out, issue{key, fmt.Sprintf("%s: %q is not a tool; use one of %s", key, tool, strings.Join(Tools, ", "))})
			continue
		}
		if v := p.ToolApproval[tool]; v != "ask" && v != "auto" && v != "never" {
			out = append(out, issue{key, fmt.Sprintf("%s: %q is not allowed; use one of ask, auto, never", key, v)})
		}
	}
	if p.Sandbox != "" && p.Sandbox != "workspace-write" {
		key := prefix + ".sandbox"
		out = append(out, issue{key, fmt.Sprintf(`%s: %q is not a sandbox; use "workspace-write" or leave it unset`, key, p.Sandbox)})
	}
	return out
}

// Defaults returns the built-in configuration, the lowest layer, including
// the built-in profiles "shell" (runs the prompt with the platform's shell:
// /bin/sh -c, on Windows cmd.exe /d /s /c), "script" and "deepcode"
// (agentd's own agent; see [Config.DefaultProfile]).
func Defaults() Config {
	var c Config
	c.Port = 3081
	c.Log.Level = "info"
	c.Service.StartTimeout = 15 * time.Second
	c.Service.StopTimeout = 60 * time.Second
	c.Supervisor.RestartMinInterval = 1 * time.Second
	c.Supervisor.RestartMaxInterval = 10 * time.Second
	c.Agentd.IdleTimeout = 5 * time.Minute
	c.Agentd.RuntimeIdleTimeout = 2 * time.Minute
	c.Agentd.MaxRuntimes = 4
	c.Agentd.LeaseTTL = 15 * time.Second
	c.Termhost.IdleTimeout = 5 * time.Minute
	c.Termhost.MaxLive = 8
	c.Termhost.MaxExited = 8
	c.Profiles = map[string]Profile{
		"shell":  {Provider: "exec", Command: shellCommand(), ApprovalPolicy: defaultApprovalPolicy},
		"script": {Provider: "script", ApprovalPolicy: defaultApprovalPolicy},
		// agentd's own agent: it needs a model ([profiles.deepcode] model,
		// base_url, api) and becomes the default profile once it has one.
		"deepcode": {Provider: "deepcode", API: "chat", ApprovalPolicy: defaultApprovalPolicy},
	}
	return c
}

// LoadOptions says where Load finds each layer.
type LoadOptions struct {
	// File is the path of config.toml. A missing file is fine; "" means no file.
	File string
	// Environ is the environment as KEY=value strings; nil means os.Environ().
	Environ []string
	// Flags is the command's flag set, parsed. It may be nil. Only flags
	// that are in FlagKeys and were set on the command line (Changed) apply.
	Flags *pflag.FlagSet
	// FlagKeys maps a flag name to the configuration key it sets,
	// e.g. "port" → "port". Every key must be one of Keys().
	FlagKeys map[string]string
}

// Load builds the configuration from defaults, the file, the environment and
// the flags that were set (see the package documentation for precedence),
// then gives every profile without an approval policy "ask" and validates
// the result. Every error is an *errs.Error with code
// errs.ConfigInvalid, except a FlagKeys entry naming an unknown key, which is
// a programming error (errs.Internal).
func Load(opts LoadOptions) (*Config, error) {
	for flag, key := range opts.FlagKeys {
		if _, ok := fieldByKey()[key]; !ok {
			return nil, errs.New(errs.Internal, "flag --%s is mapped to unknown configuration key %q", flag, key)
		}
	}

	var fileLayer, flagLayer *koanf.Koanf
	var flagOf map[string]string
	if opts.File != "" {
		var err error
		if fileLayer, err = loadFile(opts.File); err != nil {
			return nil, err
		}
	}
	envLayer, err := loadEnv(opts.Environ)
	if err != nil {
		return nil, err
	}
	if opts.Flags != nil {
		if flagLayer, flagOf, err = loadFlags(opts.Flags, opts.FlagKeys); err != nil {
			return nil, err
		}
	}
	origin := map[string]string{}
	var c Config
	if empty(fileLayer) && empty(envLayer) && empty(flagLayer) {
		// Nothing is set (no file, no DEEPCODE_* variable, no flag): the
		// defaults are the configuration, and the merge below — reflection
		// over every key, a third of a millisecond of every CLI command's
		// start — would only rebuild them (TestLoadDefaultsFastPath).
		c = Defaults()
	} else if c, err = merge(fileLayer, envLayer, flagLayer, opts.File, flagOf, origin); err != nil {
		return nil, err
	}
	for name, p := range c.Profiles {
		if p.ApprovalPolicy == "" {
			p.ApprovalPolicy = defaultApprovalPolicy
			c.Profiles[name] = p
		}
	}
	if issues := c.validate(); len(issues) > 0 {
		msgs := make([]string, len(issues))
		for i, is := range issues {
			msgs[i] = is.msg
			if src := sourceOf(origin, is.key); src != "" {
				msgs[i] += " (set by " + src + ")"
			}
		}
		return nil, errs.New(errs.ConfigInvalid, "%s", strings.Join(msgs, "; "))
	}
	return &c, nil
}

// empty reports a layer that sets nothing.
func empty(layer *koanf.Koanf) bool { return layer == nil || len(layer.Raw()) == 0 }

// merge decodes the defaults with the layers over them, recording in
// origin which layer set each key (for validation messages).
func merge(fileLayer, envLayer, flagLayer *koanf.Koanf, file string, flagOf, origin map[string]string) (Config, error) {
	merged := koanf.New(".")
	record := func(layer *koanf.Koanf, describe func(key string) string) error {
		for key := range layer.All() {
			if _, ok := fieldByKey()[key]; ok {
				origin[key] = describe(key)
				continue
			}
			// "profiles.<name>.<setting>[.…]": remember who set the
			// profile and the setting, for validation messages.
			if parts := strings.SplitN(key, ".", 4); len(parts) >= 2 && tableByKey(parts[0]) {
				origin[parts[0]+"."+parts[1]] = describe(key)
				if len(parts) >= 3 {
					origin[strings.Join(parts[:3], ".")] = describe(key)
				}
			}
		}
		return merged.Merge(layer)
	}
	if err := merged.Load(confmap.Provider(defaultValues(), "."), nil); err != nil {
		return Config{}, errs.Wrap(err, errs.Internal, "loading configuration defaults")
	}
	// The named tables are nested maps already: no delimiter, so that no
	// key inside them is split at a dot.
	if err := merged.Load(confmap.Provider(defaultTables(), ""), nil); err != nil {
		return Config{}, errs.Wrap(err, errs.Internal, "loading configuration defaults")
	}
	if fileLayer != nil {
		if err := record(fileLayer, func(string) string { return file }); err != nil {
			return Config{}, errs.Wrap(err, errs.Internal, "merging %s", file)
		}
	}
	if err := record(envLayer, EnvName); err != nil {
		return Config{}, errs.Wrap(err, errs.Internal, "merging the environment")
	}
	if flagLayer != nil {
		if err := record(flagLayer, func(key string) string { return "--" + flagOf[key] }); err != nil {
			return Config{}, errs.Wrap(err, errs.Internal, "merging the flags")
		}
	}
	var c Config
	// Every layer was checked key by key, so this strict decode only
	// fails on a bug; it is the safety net that keeps unknown keys fatal.
	if err := merged.UnmarshalWithConf("", &c, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: decoderConfig()}); err != nil {
		return Config{}, errs.Wrap(err, errs.ConfigInvalid, "configuration does not fit its schema")
	}
	return c, nil
}

// sourceOf is the layer that set key or, failing that, the nearest enclosing
// key it recorded ("profiles.fast" for "profiles.fast.command").
func sourceOf(origin map[string]string, key string) string {
	for {
		if src, ok := origin[key]; ok {
			return src
		}
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return ""
		}
		key = key[:i]
	}
}

// loadFile reads and checks the TOML file. It returns nil, nil when the file
// does not exist.
func loadFile(path string) (*koanf.Koanf, error) {
	b, err := file.Provider(path).ReadBytes()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "%s: cannot read the configuration file; fix its permissions or remove it", path)
	}
	m, err := toml.Parser().Unmarshal(b)
	if err != nil {
		where := path
		var de *gotoml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			where = fmt.Sprintf("%s:%d:%d", path, row, col)
		}
		return nil, errs.New(errs.ConfigInvalid, "%s: not valid TOML: %s; fix the syntax of the file",
			where, strings.TrimPrefix(err.Error(), "toml: "))
	}
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "loading %s", path)
	}
	problems := check(k)
	if len(problems) == 0 {
		return k, nil
	}
	msgs := make([]string, len(problems))
	unknown := false
	for i, p := range problems {
		switch p.kind {
		case unknownKey:
			unknown = true
			msgs[i] = fmt.Sprintf("unknown key %q", p.key)
			if p.near != "" {
				msgs[i] += fmt.Sprintf(" (did you mean %q?)", p.near)
			}
		case notATable:
			msgs[i] = fmt.Sprintf("%s: expected %s, got %s", p.key, p.want, p.got)
		case badName:
			msgs[i] = badNameMsg(p.key, p.got)
		default:
			msgs[i] = fmt.Sprintf("%s: expected %s, got %s", p.key, p.want, p.got)
		}
	}
	what := "fix the values in the file"
	if unknown {
		what = "correct or remove the unknown keys (known keys: " + strings.Join(fileKeys(), ", ") + ") and fix the file"
	}
	return nil, errs.New(errs.ConfigInvalid, "%s: %s; %s", path, strings.Join(msgs, "; "), what)
}

// badNameMsg says that name, the table at key, is not a valid profile name.
func badNameMsg(key, name string) string {
	return fmt.Sprintf("%s: %q is not a valid profile name; rename it to 1 to 64 lower-case letters, digits, \"_\" and \"-\", starting with a letter or digit (%s)",
		key, name, namePattern)
}

// loadEnv reads the variables named EnvName(k) for known keys k. Profiles
// have no variables.
func loadEnv(environ []string) (*koanf.Koanf, error) {
	keyOf := make(map[string]string, len(Keys()))
	for _, key := range Keys() {
		keyOf[EnvName(key)] = key
	}
	opt := env.Opt{
		Prefix: EnvPrefix,
		TransformFunc: func(name, value string) (string, any) {
			if value == "" {
				return "", nil
			}
			return keyOf[name], value // "" for names that are not configuration
		},
	}
	if environ != nil {
		opt.EnvironFunc = func() []string { return environ }
	}
	k := koanf.New(".")
	if err := k.Load(env.Provider(".", opt), nil); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "reading the environment")
	}
	problems := check(k)
	if len(problems) == 0 {
		return k, nil
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = fmt.Sprintf("environment variable %s=%s: expected %s for %s", EnvName(p.key), p.got, p.want, p.key)
	}
	return nil, errs.New(errs.ConfigInvalid, "%s; fix or unset the variable", strings.Join(msgs, "; "))
}

// loadFlags reads the flags in flagKeys that were set. flagOf maps each key
// read back to its flag's name.
func loadFlags(fs *pflag.FlagSet, flagKeys map[string]string) (k *koanf.Koanf, flagOf map[string]string, err error) {
	flagOf = map[string]string{}
	p := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
		key, ok := flagKeys[f.Name]
		if !ok || !f.Changed {
			return "", nil
		}
		flagOf[key] = f.Name
		return key, posflag.FlagVal(fs, f)
	})
	k = koanf.New(".")
	if err := k.Load(p, nil); err != nil {
		return nil, nil, errs.Wrap(err, errs.Internal, "reading the flags")
	}
	problems := check(k)
	if len(problems) == 0 {
		return k, flagOf, nil
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = fmt.Sprintf("flag --%s %s: expected %s for %s", flagOf[p.key], p.got, p.want, p.key)
	}
	return nil, nil, errs.New(errs.ConfigInvalid, "%s; fix the flag", strings.Join(msgs, "; "))
}

type problemKind int

const (
	wrongType problemKind = iota
	unknownKey
	notATable
	badName
)

type problem struct {
	key  string
	kind problemKind
	want string // what the key accepts, for wrongType and notATable
	got  string // the offending value, formatted; the name, for badName
	near string // the closest known key, for unknownKey; "" if none
}

// check decodes every key of one layer on its own, so that each problem is
// reported against the layer (file, variable, flag) and key that caused it.
// Problems come in key order.
func check(layer *koanf.Koanf) []problem {
	all := layer.All()
	keys := make([]string, 0, len(all))
	for key := range all {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var out []problem
	for _, key := range keys {
		val := all[key]
		if first, _, _ := strings.Cut(key, "."); tableByKey(first) {
			continue // checked as a whole below
		}
		f, ok := fieldByKey()[key]
		switch {
		case ok:
			out = append(out, checkValue(key, val, f)...)
		case isSection(key):
			if m, ok := val.(map[string]any); !ok || len(m) != 0 {
				out = append(out, problem{key: key, kind: notATable, want: "a table of settings", got: formatValue(val)})
			}
		default:
			out = append(out, problem{key: key, kind: unknownKey, near: closestKey(key)})
		}
	}
	raw := layer.Raw()
	for _, t := range tables() {
		if val, ok := raw[t.key]; ok {
			out = append(out, checkTable(t, val)...)
		}
	}
	slices.SortStableFunc(out, func(a, b problem) int { return strings.Compare(a.key, b.key) })
	return out
}

// checkTable checks the value of a named-table key such as profiles: a table
// of validly named tables holding only known, well-typed settings.
func checkTable(t table, val any) []problem {
	entries, ok := val.(map[string]any)
	if !ok {
		return []problem{{key: t.key, kind: notATable, want: "a table of " + t.key, got: formatValue(val)}}
	}
	var out []problem
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		prefix := joinKey(t.key, name)
		if !validName(name) {
			out = append(out, problem{key: prefix, kind: badName, got: name})
		}
		settings, ok := entries[name].(map[string]any)
		if !ok {
			out = append(out, problem{key: prefix, kind: notATable, want: "a table of settings", got: formatValue(entries[name])})
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(settings)) {
			key := joinKey(prefix, k)
			f, ok := t.field(k)
			if !ok {
				known := make([]string, len(t.fields))
				for i, f := range t.fields {
					known[i] = joinKey(prefix, f.key)
				}
				out = append(out, problem{key: key, kind: unknownKey, near: closest(key, known)})
				continue
			}
			out = append(out, checkValue(key, settings[k], f)...)
		}
	}
	return out
}

// checkValue checks that val decodes into f's type. A list or a table is
// checked element by element, so that a problem names the element
// ("profiles.x.command[1]", "profiles.x.env.HOME"). The value of a secret
// field is described, never shown.
func checkValue(key string, val any, f field) []problem {
	return checkValueOf(key, val, f.typ, f.tag.Get("secret") == "true")
}

func checkValueOf(key string, val any, t reflect.Type, secret bool) []problem {
	var out []problem
	switch v := val.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map && t.Key().Kind() == reflect.String {
			for _, k := range slices.Sorted(maps.Keys(v)) {
				out = append(out, checkValueOf(joinKey(key, k), v[k], t.Elem(), secret)...)
			}
			return out
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, e := range v {
				out = append(out, checkValueOf(fmt.Sprintf("%s[%d]", key, i), e, t.Elem(), secret)...)
			}
			return out
		}
	}
	if err := decodeInto(val, t); err != nil {
		got := formatValue(val)
		if secret {
			got = describeValue(val)
		}
		out = append(out, problem{key: key, kind: wrongType, want: describeType(t), got: got})
	}
	return out
}

// joinKey appends k to the dotted key prefix, quoting k as TOML does when it
// is not a bare key: profiles."My Profile".
func joinKey(prefix, k string) string {
	if k == "" || strings.IndexFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) >= 0 {
		k = strconv.Quote(k)
	}
	return prefix + "." + k
}

// decodeInto decodes one value into a fresh value of type t with the same
// rules as the whole-struct decode.
func decodeInto(val any, t reflect.Type) error {
	dc := decoderConfig()
	dc.Result = reflect.New(t).Interface()
	d, err := mapstructure.NewDecoder(dc)
	if err != nil {
		return err
	}
	return d.Decode(val)
}

// decoderConfig is koanf's default decoder (duration and text-unmarshaler
// hooks, weakly typed input so that environment strings convert) made strict:
// unused keys are errors and strictHook refuses the weak conversions that
// only hide mistakes.
func decoderConfig() *mapstructure.DecoderConfig {
	return &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			strictHook,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc(),
		),
		WeaklyTypedInput: true,
		ErrorUnused:      true,
		TagName:          "koanf",
	}
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()
)

var errWrongType = errors.New("wrong type")

// strictHook lets WeaklyTypedInput convert strings (the environment's only
// type) to numbers, booleans and durations, and refuses the other weak
// conversions: true as 1, 3 as "3", a list as its only element, a single
// value as a list, an empty list as a table, a bare number as a duration in
// nanoseconds, 1.5 truncated to 1.
func strictHook(from, to reflect.Type, data any) (any, error) {
	if data == nil {
		return data, nil
	}
	fk := from.Kind()
	isInt := func(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Uint64 }
	isFloat := func(k reflect.Kind) bool { return k == reflect.Float32 || k == reflect.Float64 }
	switch {
	case to == durationType:
		if from == durationType || fk == reflect.String {
			return data, nil
		}
		return nil, errWrongType
	case to.Kind() != reflect.String && reflect.PointerTo(to).Implements(textUnmarshalerType):
		if fk == reflect.String || from == to {
			return data, nil
		}
		return nil, errWrongType
	}
	ok := true
	switch tk := to.Kind(); {
	case isInt(tk):
		ok = isInt(fk) || fk == reflect.String
		if isFloat(fk) {
			f := reflect.ValueOf(data).Float()
			ok = f == float64(int64(f))
		}
	case isFloat(tk):
		ok = isInt(fk) || isFloat(fk) || fk == reflect.String
	case tk == reflect.Bool:
		ok = fk == reflect.Bool || fk == reflect.String
	case tk == reflect.String:
		ok = fk == reflect.String
	case tk == reflect.Slice || tk == reflect.Array:
		ok = fk == reflect.Slice || fk == reflect.Array
	case tk == reflect.Map:
		ok = fk == reflect.Map
	}
	if !ok {
		return nil, errWrongType
	}
	return data, nil
}

func describeType(t reflect.Type) string {
	if t == durationType {
		return `a duration such as "90s" or "5m"`
	}
	switch k := t.Kind(); {
	case k >= reflect.Int && k <= reflect.Int64:
		return "an integer"
	case k >= reflect.Uint && k <= reflect.Uint64:
		return "a non-negative integer"
	case k == reflect.Float32 || k == reflect.Float64:
		return "a number"
	case k == reflect.Bool:
		return "true or false"
	case k == reflect.String:
		return "a string"
	case k == reflect.Slice || k == reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "a list of strings"
		}
		return "a list"
	case k == reflect.Map:
		if t.Elem().Kind() == reflect.String {
			return "a table of strings"
		}
		return "a table"
	}
	return t.String()
}

// describeValue says what kind of value v is without showing it.
func describeValue(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "true or false"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "an integer"
	case float32, float64:
		return "a number"
	case map[string]any:
		return "a table"
	case []any:
		return "a list"
	}
	return "a date or time"
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}

// EnvName is the environment variable that sets key:
// "service.stop_timeout" → "DEEPCODE_SERVICE_STOP_TIMEOUT". Only the keys in
// [Keys] have a variable that Load reads; the name EnvName gives a profile key
// ("profiles.x.provider" → DEEPCODE_PROFILES_X_PROVIDER) is ignored.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every key of a single setting, dotted and sorted: the keys
// that the file, the environment ([EnvName]) and flags can all set. Profile
// keys are not among them; see [ProfileKeys].
func Keys() []string {
	fields := schema()
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return keys
}

// ProfileKeys returns the keys of a profile, dotted and sorted, with
// "<name>" standing for the profile's name: "profiles.<name>.approval_policy",
// "profiles.<name>.args", … Only the file sets them.
func ProfileKeys() []string {
	var keys []string
	for _, t := range tables() {
		if t.key == "profiles" {
			for _, f := range t.fields {
				keys = append(keys, t.key+".<name>."+f.key)
			}
		}
	}
	return keys
}

// fileKeys is every key the file knows, for the unknown-key hint.
func fileKeys() []string {
	keys := append(Keys(), ProfileKeys()...)
	slices.Sort(keys)
	return keys
}

// field is one leaf setting of Config, or of an entry of a named table.
type field struct {
	key   string // dotted; for a table's field, relative to the entry
	index []int
	typ   reflect.Type
	tag   reflect.StructTag
}

// table is a field of Config of type map[string]Struct: named tables of
// settings ([profiles.<name>] in the file) that only the defaults and the
// file set.
type table struct {
	key    string // "profiles"
	index  []int
	typ    reflect.Type
	fields []field // the settings of one entry, sorted by key
}

func (t table) field(key string) (field, bool) {
	i := slices.IndexFunc(t.fields, func(f field) bool { return f.key == key })
	if i < 0 {
		return field{}, false
	}
	return t.fields[i], true
}

// where a struct is walked from, for what its fields may be.
type where int

const (
	inConfig  where = iota // Config itself: sections, settings, named tables
	inSection              // a section: settings and sections
	inTable                // an entry of a named table: settings, lists, string tables
)

// schemas lists Config's leaf settings and its named tables, each sorted by
// key. A struct field is a section (recursed into) unless it can decode
// itself from text; a map[string]Struct field of Config is a named table.
var schemas = sync.OnceValues(func() ([]field, []table) {
	var tabs []table
	var walk func(t reflect.Type, prefix string, index []int, at where) []field
	walk = func(t reflect.Type, prefix string, index []int, at where) []field {
		var out []field
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name := sf.Tag.Get("koanf")
			if name == "" || name == "-" || strings.ContainsAny(name, ". ") {
				panic(fmt.Sprintf("config: field %s needs a koanf tag naming its key", sf.Name))
			}
			idx := append(slices.Clone(index), i)
			k := sf.Type.Kind()
			switch {
			case k == reflect.Struct && !reflect.PointerTo(sf.Type).Implements(textUnmarshalerType):
				if at == inTable {
					panic(fmt.Sprintf("config: field %s: a named table's entry cannot have sections", sf.Name))
				}
				out = append(out, walk(sf.Type, prefix+name+".", idx, inSection)...)
				continue
			case k == reflect.Map && sf.Type.Key().Kind() == reflect.String && sf.Type.Elem().Kind() == reflect.Struct:
				if at != inConfig {
					panic(fmt.Sprintf("config: field %s: named tables belong at the top of Config", sf.Name))
				}
				fields := walk(sf.Type.Elem(), "", nil, inTable)
				slices.SortFunc(fields, func(a, b field) int { return strings.Compare(a.key, b.key) })
				tabs = append(tabs, table{key: prefix + name, index: idx, typ: sf.Type, fields: fields})
				continue
			case (k == reflect.Map || k == reflect.Slice || k == reflect.Array) && at != inTable:
				panic(fmt.Sprintf("config: field %s: lists and tables are settings only inside a named table", sf.Name))
			}
			checkTags(sf)
			out = append(out, field{key: prefix + name, index: idx, typ: sf.Type, tag: sf.Tag})
		}
		return out
	}
	fields := walk(reflect.TypeFor[Config](), "", nil, inConfig)
	slices.SortFunc(fields, func(a, b field) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(tabs, func(a, b table) int { return strings.Compare(a.key, b.key) })
	return fields, tabs
})

// checkTags panics on a range tag that does not fit its field.
func checkTags(sf reflect.StructField) {
	k := sf.Type.Kind()
	for _, t := range []string{"min", "max"} {
		v, ok := sf.Tag.Lookup(t)
		if !ok {
			continue
		}
		if sf.Type == durationType {
			if t != "min" || v != "0" {
				panic(fmt.Sprintf(`config: field %s: a duration takes only min:"0" (zero allowed), not %s:%q`, sf.Name, t, v))
			}
			continue
		}
		if _, err := strconv.ParseInt(v, 10, 64); err != nil || k < reflect.Int || k > reflect.Int64 {
			panic(fmt.Sprintf("config: field %s: tag %s:%q needs an integer field and value", sf.Name, t, v))
		}
	}
	if _, ok := sf.Tag.Lookup("oneof"); ok && k != reflect.String {
		panic(fmt.Sprintf("config: field %s: tag oneof needs a string field", sf.Name))
	}
	for _, t := range []string{"required", "secret"} {
		if v, ok := sf.Tag.Lookup(t); ok && v != "true" {
			panic(fmt.Sprintf(`config: field %s: tag %s takes only "true"`, sf.Name, t))
		}
	}
}

// schema lists Config's leaf settings, sorted by key.
func schema() []field {
	fields, _ := schemas()
	return fields
}

// tables lists Config's named tables, sorted by key.
func tables() []table {
	_, tabs := schemas()
	return tabs
}

// tableByKey reports whether key is a named table ("profiles").
func tableByKey(key string) bool {
	return slices.ContainsFunc(tables(), func(t table) bool { return t.key == key })
}

var fieldByKey = sync.OnceValue(func() map[string]field {
	m := map[string]field{}
	for _, f := range schema() {
		m[f.key] = f
	}
	return m
})

// isSection reports whether key is a table holding known keys ("service").
func isSection(key string) bool {
	for _, f := range schema() {
		if strings.HasPrefix(f.key, key+".") {
			return true
		}
	}
	return false
}

// closestKey is the known key nearest to an unknown one, for a "did you
// mean" hint, or "" when none is close. A key of three or more parts is also
// compared with the settings of a profile named by its second part, so that
// "profile.fast.model" suggests "profiles.fast.model".
func closestKey(key string) string {
	known := Keys()
	if parts := strings.SplitN(key, ".", 3); len(parts) == 3 {
		for _, t := range tables() {
			for _, f := range t.fields {
				known = append(known, joinKey(t.key, parts[1])+"."+f.key)
			}
		}
	}
	return closest(key, known)
}

// closest is the key among known nearest to key within 3 edits, or "".
func closest(key string, known []string) string {
	best, bestDist := "", 4
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// defaultValues is Defaults() as a flat key → value map, without the named
// tables.
func defaultValues() map[string]any {
	d := reflect.ValueOf(Defaults())
	m := map[string]any{}
	for _, f := range schema() {
		m[f.key] = d.FieldByIndex(f.index).Interface()
	}
	return m
}

// defaultTables is the named tables of Defaults() as nested maps
// ({"profiles": {"shell": {"provider": "exec", …}}}) holding only the
// settings that are not zero, so that the file merges into them key by key
// and an unset setting decodes to its zero value, as in Defaults().
func defaultTables() map[string]any {
	d := reflect.ValueOf(Defaults())
	m := map[string]any{}
	for _, t := range tables() {
		entries := map[string]any{}
		for it := d.FieldByIndex(t.index).MapRange(); it.Next(); {
			settings := map[string]any{}
			for _, f := range t.fields {
				if v := it.Value().FieldByIndex(f.index); !v.IsZero() {
					settings[f.key] = v.Interface()
				}
			}
			entries[it.Key().String()] = settings
		}
		m[t.key] = entries
	}
	return m
}

type issue struct {
	key string
	msg string
}

// Validate checks every value's range: integers against their min/max tags
// (port 0..65535, limits at least 1), strings against their oneof tags
// (log.level is debug, info, warn or error), durations positive (a profile's
// timeout may be 0), and the supervisor's restart interval minimum no larger
// than its maximum. Every profile must have a valid name and a provider, an
// exec profile a command, and env valid variable names. Validate does not
// fill in defaults: a profile's approval_policy must be set (Load sets
// "ask"). The error is an *errs.Error with code errs.ConfigInvalid naming
// every bad key ("profiles.fast.provider").
func (c *Config) Validate() error {
	issues := c.validate()
	if len(issues) == 0 {
		return nil
	}
	msgs := make([]string, len(issues))
	for i, is := range issues {
		msgs[i] = is.msg
	}
	return errs.New(errs.ConfigInvalid, "%s", strings.Join(msgs, "; "))
}

func (c *Config) validate() []issue {
	var out []issue
	v := reflect.ValueOf(c).Elem()
	def := reflect.ValueOf(Defaults())
	for _, f := range schema() {
		if msg := checkField(f.key, f, v.FieldByIndex(f.index), def.FieldByIndex(f.index)); msg != "" {
			out = append(out, issue{f.key, msg})
		}
	}
	for _, t := range tables() {
		entries := v.FieldByIndex(t.index)
		names := make([]string, 0, entries.Len())
		for _, k := range entries.MapKeys() {
			names = append(names, k.String())
		}
		slices.Sort(names)
		for _, name := range names {
			prefix := joinKey(t.key, name)
			if !validName(name) {
				out = append(out, issue{prefix, badNameMsg(prefix, name)})
			}
			e := entries.MapIndex(reflect.ValueOf(name))
			for _, f := range t.fields {
				key := prefix + "." + f.key
				if msg := checkField(key, f, e.FieldByIndex(f.index), reflect.Value{}); msg != "" {
					out = append(out, issue{key, msg})
				}
			}
			if c, ok := e.Interface().(interface{ check(prefix string) []issue }); ok {
				out = append(out, c.check(prefix)...)
			}
		}
	}
	if lo, hi := c.Supervisor.RestartMinInterval, c.Supervisor.RestartMaxInterval; lo > 0 && hi > 0 && lo > hi {
		out = append(out, issue{"supervisor.restart_min_interval", fmt.Sprintf(
			"supervisor.restart_min_interval (%s) is greater than supervisor.restart_max_interval (%s); make the minimum no larger than the maximum", lo, hi)})
	}
	return out
}

// checkField checks one value fv of field f against its tags; key names it
// in the message, def is its default if it has one. It returns "" when the
// value is fine.
func checkField(key string, f field, fv, def reflect.Value) string {
	if _, ok := f.tag.Lookup("required"); ok && fv.IsZero() {
		if set := f.tag.Get("oneof"); set != "" {
			return fmt.Sprintf("%s is not set; set it to one of %s", key, strings.Join(strings.Fields(set), ", "))
		}
		return fmt.Sprintf("%s is not set; set it", key)
	}
	if f.typ == durationType {
		d := time.Duration(fv.Int())
		if _, zeroOK := f.tag.Lookup("min"); zeroOK { // min:"0", the only range a duration takes
			if d < 0 {
				return fmt.Sprintf("%s: %s is negative; use 0 or a positive duration such as \"10m\"", key, d)
			}
			return ""
		}
		if d <= 0 {
			if def.IsValid() {
				return fmt.Sprintf("%s: %s is not a positive duration; use a duration such as %q (the default)", key, d, time.Duration(def.Int()))
			}
			return fmt.Sprintf("%s: %s is not a positive duration; use a duration such as \"90s\"", key, d)
		}
		return ""
	}
	switch fv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return checkRange(key, f, fv.Int())
	case reflect.String:
		if set := f.tag.Get("oneof"); set != "" && !slices.Contains(strings.Fields(set), fv.String()) {
			return fmt.Sprintf("%s: %q is not allowed; use one of %s", key, fv.String(), strings.Join(strings.Fields(set), ", "))
		}
	}
	return ""
}

func checkRange(key string, f field, n int64) string {
	minS, hasMin := f.tag.Lookup("min")
	maxS, hasMax := f.tag.Lookup("max")
	lo, _ := strconv.ParseInt(minS, 10, 64)
	hi, _ := strconv.ParseInt(maxS, 10, 64)
	switch {
	case hasMin && hasMax && (n < lo || n > hi):
		return fmt.Sprintf("%s: %d is out of range; use a value from %d to %d", key, n, lo, hi)
	case hasMin && !hasMax && n < lo:
		return fmt.Sprintf("%s: %d is too small; use %d or more", key, n, lo)
	case hasMax && !hasMin && n > hi:
		return fmt.Sprintf("%s: %d is too large; use %d or less", key, n, hi)
	}
	return ""
}
