package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/config"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// runtimeInstall says how to install each provider's CLI (the hint of
// PROVIDER_UNAVAILABLE).
var runtimeInstall = map[string]struct{ bin, hint string }{
	"codex":    {"codex", "npm install -g @openai/codex"},
	"claude":   {"claude", "npm install -g @anthropic-ai/claude-code"},
	"opencode": {"opencode", "npm install -g opencode-ai"},
}

// ResolveBinary finds the runtime's executable: the profile's binary, or
// the provider's CLI on PATH.
func ResolveBinary(t *TurnRun) (string, error) {
	inst := runtimeInstall[t.Profile.Provider]
	bin := t.Profile.Binary
	if bin == "" {
		bin = inst.bin
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		e := errs.Wrap(err, errs.ProviderUnavailable, "%s is not installed or not executable (%s); install it with `%s`, or set profiles.%s.binary to its path",
			inst.bin, bin, inst.hint, t.ProfileName)
		return "", e.With("install", inst.hint)
	}
	return path, nil
}

// ProviderSecrets are the environment variables that carry each provider's
// credentials or endpoint: agentd's own environment passes them to that
// provider's runtime only.
var ProviderSecrets = map[string][]string{
	"codex":  {"OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"},
	"claude": {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CODE_OAUTH_TOKEN"},
	// opencode's own key (the "deepcode" provider of a profile with
	// base_url, or OpenCode Zen).
	"opencode": {"OPENCODE_API_KEY", "OPENCODE_SERVER_PASSWORD"},
}

// Env is the environment of a provider's runtime: agentd's own,
// without deepcode's variables (but DEEPCODE_HOME) and other providers' credentials, plus the
// profile's credential file, its env table and extra (in that order, later
// wins). secrets lists the credential values, for redaction.
func Env(provider string, p config.Profile, extra map[string]string) (env []string, secrets []string, err error) {
	var foreign []string
	for prov, names := range ProviderSecrets {
		if prov != provider {
			foreign = append(foreign, names...)
		}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		// deepcode's own settings are not the runtime's business; its
		// home stays, so that whatever the runtime spawns is attributable.
		if (strings.HasPrefix(k, "DEEPCODE_") && k != "DEEPCODE_HOME") || slices.Contains(foreign, k) {
			continue
		}
		if slices.Contains(ProviderSecrets[provider], k) {
			secrets = append(secrets, v)
		}
		env = append(env, kv)
	}
	set := func(k, v string) {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		env = append(env, k+"="+v)
	}
	if p.CredentialsFile != "" {
		creds, err := ReadCredentials(p.CredentialsFile)
		if err != nil {
			return nil, nil, err
		}
		for _, k := range SortedKeys(creds) {
			set(k, creds[k])
			secrets = append(secrets, creds[k])
		}
	}
	for _, k := range SortedKeys(p.Env) {
		set(k, p.Env[k])
		secrets = append(secrets, p.Env[k])
	}
	for _, k := range SortedKeys(extra) {
		set(k, extra[k])
	}
	return env, secrets, nil
}

// SortedKeys are the keys of m in order: an environment built from a map
// is the same from one start to the next.
func SortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ReadCredentials reads a credential file: KEY=VALUE lines ("export " and
// quotes allowed, # comments). It must be private to the user (no group or
// other permission bits). Errors name the file, never its content.
func ReadCredentials(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			e := errs.New(errs.ProviderUnavailable, "the credential file %s does not exist", path)
			e.Retryable = false
			return nil, e
		}
		return nil, errs.Wrap(err, errs.ProviderUnavailable, "cannot read the credential file %s", path)
	}
	defer f.Close()
	if runtime.GOOS != "windows" {
		st, err := f.Stat()
		if err != nil {
			return nil, errs.Wrap(err, errs.ProviderUnavailable, "cannot read the credential file %s", path)
		}
		if st.Mode().Perm()&0o077 != 0 {
			e := errs.New(errs.ProviderUnavailable, "the credential file %s is readable by others (mode %04o); run chmod 600 %s", path, st.Mode().Perm(), path)
			e.Retryable = false
			return nil, e
		}
	}
	out := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\x00") {
			e := errs.New(errs.ProviderUnavailable, "the credential file %s: line %d is not KEY=VALUE", path, n)
			e.Retryable = false
			return nil, e
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	return out, nil
}

// Redact replaces every secret value in s.
func Redact(s string, secrets []string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// Proc is a runtime's process: stdin and stdout pipes, stderr kept
// as a bounded tail, in its own process group (killed with agentd on
// Linux).
type Proc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stdout  *os.File
	stderr  *TailBuffer
	secrets []string
	done    chan struct{}
	waitErr error
	wmu     sync.Mutex

	closeOnce sync.Once
	cleanup   []func()
}

// ProcSpec describes a runtime process to start.
type ProcSpec struct {
	Name    string
	Argv    []string
	Dir     string
	Env     []string
	Secrets []string
	Cleanup []func() // after the process is gone
}

// StartProc starts a runtime's process in its own group.
func StartProc(s ProcSpec) (*Proc, error) {
	cmd := exec.Command(s.Argv[0], s.Argv[1:]...)
	cmd.Dir = s.Dir
	cmd.Env = s.Env
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot start %s", s.Name)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot start %s", s.Name)
	}
	cmd.Stdout = pw
	p := &Proc{name: s.Name, cmd: cmd, stdin: stdin, stdout: pr, stderr: NewTailBuffer(16 << 10), secrets: s.Secrets,
		done: make(chan struct{}), cleanup: s.Cleanup}
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { p.stderr.Add(string(b)); return len(b), nil })
	// The runtime outlives this goroutine's turn: it is started from a
	// goroutine that is not locked to its thread, so the parent-death
	// signal (tied to the forking thread) fires only when agentd exits.
	if err := StartInGroup(cmd); err != nil {
		pr.Close()
		pw.Close()
		for _, f := range s.Cleanup {
			f()
		}
		return nil, errs.Wrap(err, errs.ProviderUnavailable, "cannot start %s: %s", s.Name, StartProblem(err))
	}
	pw.Close()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Name is the runtime's name in errors ("codex").
func (p *Proc) Name() string { return p.name }

// Stdout is the read end of the process's stdout.
func (p *Proc) Stdout() *os.File { return p.stdout }

// Stderr is the bounded tail of the process's stderr; what a runtime's
// reader takes from stdout but means for a crash report goes there too.
func (p *Proc) Stderr() *TailBuffer { return p.stderr }

// Secrets are the credential values of the process's environment, for
// Redact.
func (p *Proc) Secrets() []string { return p.secrets }

// WriteLine writes one line to stdin.
func (p *Proc) WriteLine(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	b = append(b, '\n')
	_, err := p.stdin.Write(b)
	return err
}

// Close ends the process: stdin closed, then SIGTERM, then SIGKILL to its
// group, and runs the cleanups.
func (p *Proc) Close() {
	p.closeOnce.Do(func() {
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(500 * time.Millisecond):
			TerminateGroup(p.cmd.Process.Pid, false)
			select {
			case <-p.done:
			case <-time.After(3 * time.Second):
				TerminateGroup(p.cmd.Process.Pid, true)
				<-p.done
			}
		}
		// Whatever the group left behind goes too.
		TerminateGroup(p.cmd.Process.Pid, true)
		_ = p.stdout.Close()
		for _, f := range p.cleanup {
			f()
		}
	})
}

// Kill ends the process at once.
func (p *Proc) Kill() {
	TerminateGroup(p.cmd.Process.Pid, true)
	p.Close()
}

// ExitProblem describes how the process ended, for a crash error, with the
// telling line of its stderr (an "error" line, else the last; credentials
// redacted).
func (p *Proc) ExitProblem() string {
	state := "exited"
	if p.cmd.ProcessState != nil {
		state = p.cmd.ProcessState.String()
	}
	var last, errLine string
	for _, l := range strings.Split(Redact(p.stderr.String(), p.secrets), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Stack backtrace") || strings.HasSuffix(l, "<unknown>") || strings.HasPrefix(l, "at ") {
			continue
		}
		last = l
		if errLine == "" && strings.Contains(strings.ToLower(l), "error") {
			errLine = l
		}
	}
	line := FirstNonEmpty(errLine, last)
	if len(line) > 400 {
		line = line[:400] + "…"
	}
	if line == "" {
		return state
	}
	return fmt.Sprintf("%s: %s", state, line)
}
