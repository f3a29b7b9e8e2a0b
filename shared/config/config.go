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
// # Adding a setting
//
// Add a field with a koanf tag to Config (inside the struct of its section)
// and its default to [Defaults]. The key, its environment variable, the
// unknown-key check and the type check follow from the struct by reflection.
// Range checks come from optional tags read by [Config.Validate]: min:"1",
// max:"65535" on integers and oneof:"a b c" on strings; every duration must
// be positive.
package config

import (
	"errors"
	"fmt"
	"io/fs"
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
	} `koanf:"agentd"`
	Termhost struct {
		// IdleTimeout is how long termhost stays up with no terminals.
		IdleTimeout time.Duration `koanf:"idle_timeout"`
		// MaxLive is the most terminals running at once.
		MaxLive int `koanf:"max_live" min:"1"`
		// MaxExited is the most exited terminals whose output is kept.
		MaxExited int `koanf:"max_exited" min:"1"`
	} `koanf:"termhost"`
}

// Defaults returns the built-in configuration, the lowest layer.
func Defaults() Config {
	var c Config
	c.Port = 3081
	c.Log.Level = "info"
	c.Service.StartTimeout = 15 * time.Second
	c.Service.StopTimeout = 60 * time.Second
	c.Supervisor.RestartMinInterval = 1 * time.Second
	c.Supervisor.RestartMaxInterval = 10 * time.Second
	c.Agentd.IdleTimeout = 5 * time.Minute
	c.Termhost.IdleTimeout = 5 * time.Minute
	c.Termhost.MaxLive = 8
	c.Termhost.MaxExited = 8
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
// then validates it. Every error is an *errs.Error with code
// errs.ConfigInvalid, except a FlagKeys entry naming an unknown key, which is
// a programming error (errs.Internal).
func Load(opts LoadOptions) (*Config, error) {
	for flag, key := range opts.FlagKeys {
		if _, ok := fieldByKey()[key]; !ok {
			return nil, errs.New(errs.Internal, "flag --%s is mapped to unknown configuration key %q", flag, key)
		}
	}

	merged := koanf.New(".")
	origin := map[string]string{}
	record := func(layer *koanf.Koanf, describe func(key string) string) error {
		for key := range layer.All() {
			if _, ok := fieldByKey()[key]; ok {
				origin[key] = describe(key)
			}
		}
		return merged.Merge(layer)
	}

	if err := merged.Load(confmap.Provider(defaultValues(), "."), nil); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "loading configuration defaults")
	}

	if opts.File != "" {
		layer, err := loadFile(opts.File)
		if err != nil {
			return nil, err
		}
		if layer != nil {
			if err := record(layer, func(string) string { return opts.File }); err != nil {
				return nil, errs.Wrap(err, errs.Internal, "merging %s", opts.File)
			}
		}
	}

	layer, err := loadEnv(opts.Environ)
	if err != nil {
		return nil, err
	}
	if err := record(layer, EnvName); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "merging the environment")
	}

	if opts.Flags != nil {
		layer, flagOf, err := loadFlags(opts.Flags, opts.FlagKeys)
		if err != nil {
			return nil, err
		}
		if err := record(layer, func(key string) string { return "--" + flagOf[key] }); err != nil {
			return nil, errs.Wrap(err, errs.Internal, "merging the flags")
		}
	}

	var c Config
	// Every layer was checked key by key above, so this strict decode only
	// fails on a bug; it is the safety net that keeps unknown keys fatal.
	if err := merged.UnmarshalWithConf("", &c, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: decoderConfig()}); err != nil {
		return nil, errs.Wrap(err, errs.ConfigInvalid, "configuration does not fit its schema")
	}
	if issues := c.validate(); len(issues) > 0 {
		msgs := make([]string, len(issues))
		for i, is := range issues {
			msgs[i] = is.msg
			if src := origin[is.key]; src != "" {
				msgs[i] += " (set by " + src + ")"
			}
		}
		return nil, errs.New(errs.ConfigInvalid, "%s", strings.Join(msgs, "; "))
	}
	return &c, nil
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
			if near := closestKey(p.key); near != "" {
				msgs[i] += fmt.Sprintf(" (did you mean %q?)", near)
			}
		case notATable:
			msgs[i] = fmt.Sprintf("%s: expected a table of settings, got %s", p.key, p.got)
		default:
			msgs[i] = fmt.Sprintf("%s: expected %s, got %s", p.key, p.want, p.got)
		}
	}
	what := "fix the values in the file"
	if unknown {
		what = "correct or remove the unknown keys (known keys: " + strings.Join(Keys(), ", ") + ") and fix the file"
	}
	return nil, errs.New(errs.ConfigInvalid, "%s: %s; %s", path, strings.Join(msgs, "; "), what)
}

// loadEnv reads the variables named EnvName(k) for known keys k.
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
)

type problem struct {
	key  string
	kind problemKind
	want string // what the key's type accepts, for wrongType
	got  string // the offending value, formatted
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
		f, ok := fieldByKey()[key]
		switch {
		case ok:
			if err := decodeInto(val, f.typ); err != nil {
				out = append(out, problem{key: key, kind: wrongType, want: describeType(f.typ), got: formatValue(val)})
			}
		case isSection(key):
			if m, ok := val.(map[string]any); !ok || len(m) != 0 {
				out = append(out, problem{key: key, kind: notATable, got: formatValue(val)})
			}
		default:
			out = append(out, problem{key: key, kind: unknownKey})
		}
	}
	return out
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
// conversions: true as 1, 3 as "3", a list as its only element, a bare
// number as a duration in nanoseconds, 1.5 truncated to 1.
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
		return "a list"
	}
	return t.String()
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
// "service.stop_timeout" → "DEEPCODE_SERVICE_STOP_TIMEOUT".
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// Keys returns every configuration key, dotted and sorted.
func Keys() []string {
	fields := schema()
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return keys
}

// field is one leaf setting of Config.
type field struct {
	key   string
	index []int
	typ   reflect.Type
	tag   reflect.StructTag
}

// schema lists Config's leaf settings sorted by key. A struct field is a
// section (recursed into) unless it can decode itself from text.
var schema = sync.OnceValue(func() []field {
	var out []field
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
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
			if sf.Type.Kind() == reflect.Struct && !reflect.PointerTo(sf.Type).Implements(textUnmarshalerType) {
				walk(sf.Type, prefix+name+".", idx)
				continue
			}
			for _, t := range []string{"min", "max"} {
				if v, ok := sf.Tag.Lookup(t); ok {
					if _, err := strconv.ParseInt(v, 10, 64); err != nil || sf.Type.Kind() < reflect.Int || sf.Type.Kind() > reflect.Int64 {
						panic(fmt.Sprintf("config: field %s: tag %s:%q needs an integer field and value", sf.Name, t, v))
					}
				}
			}
			if _, ok := sf.Tag.Lookup("oneof"); ok && sf.Type.Kind() != reflect.String {
				panic(fmt.Sprintf("config: field %s: tag oneof needs a string field", sf.Name))
			}
			out = append(out, field{key: prefix + name, index: idx, typ: sf.Type, tag: sf.Tag})
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	slices.SortFunc(out, func(a, b field) int { return strings.Compare(a.key, b.key) })
	return out
})

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
// mean" hint, or "" when none is close.
func closestKey(key string) string {
	best, bestDist := "", 4 // suggest only within 3 edits
	for _, k := range Keys() {
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

// defaultValues is Defaults() as a flat key → value map.
func defaultValues() map[string]any {
	d := reflect.ValueOf(Defaults())
	m := map[string]any{}
	for _, f := range schema() {
		m[f.key] = d.FieldByIndex(f.index).Interface()
	}
	return m
}

type issue struct {
	key string
	msg string
}

// Validate checks every value's range: integers against their min/max tags
// (port 0..65535, limits at least 1), strings against their oneof tags
// (log.level is debug, info, warn or error), durations positive, and the
// supervisor's restart interval minimum no larger than its maximum. The
// error is an *errs.Error with code errs.ConfigInvalid naming every bad key.
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
		fv := v.FieldByIndex(f.index)
		if f.typ == durationType {
			if d := time.Duration(fv.Int()); d <= 0 {
				out = append(out, issue{f.key, fmt.Sprintf("%s: %s is not a positive duration; use a duration such as %q (the default)",
					f.key, d, time.Duration(def.FieldByIndex(f.index).Int()))})
			}
			continue
		}
		switch fv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if msg := checkRange(f, fv.Int()); msg != "" {
				out = append(out, issue{f.key, msg})
			}
		case reflect.String:
			if set := f.tag.Get("oneof"); set != "" && !slices.Contains(strings.Fields(set), fv.String()) {
				out = append(out, issue{f.key, fmt.Sprintf("%s: %q is not allowed; use one of %s",
					f.key, fv.String(), strings.Join(strings.Fields(set), ", "))})
			}
		}
	}
	if lo, hi := c.Supervisor.RestartMinInterval, c.Supervisor.RestartMaxInterval; lo > 0 && hi > 0 && lo > hi {
		out = append(out, issue{"supervisor.restart_min_interval", fmt.Sprintf(
			"supervisor.restart_min_interval (%s) is greater than supervisor.restart_max_interval (%s); make the minimum no larger than the maximum", lo, hi)})
	}
	return out
}

func checkRange(f field, n int64) string {
	minS, hasMin := f.tag.Lookup("min")
	maxS, hasMax := f.tag.Lookup("max")
	lo, _ := strconv.ParseInt(minS, 10, 64)
	hi, _ := strconv.ParseInt(maxS, 10, 64)
	switch {
	case hasMin && hasMax && (n < lo || n > hi):
		return fmt.Sprintf("%s: %d is out of range; use a value from %d to %d", f.key, n, lo, hi)
	case hasMin && !hasMax && n < lo:
		return fmt.Sprintf("%s: %d is too small; use %d or more", f.key, n, lo)
	case hasMax && !hasMin && n > hi:
		return fmt.Sprintf("%s: %d is too large; use %d or less", f.key, n, hi)
	}
	return ""
}
