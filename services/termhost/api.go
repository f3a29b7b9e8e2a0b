package termhost

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Request limits.
const (
	minSize     = 1
	maxSize     = 1000
	readDefault = 16 << 10
	readMin     = 4 << 10
	readMax     = 64 << 10
	maxInput    = 64 << 10
	maxArgs     = 256
	maxEnv      = 128
	maxArgvSize = 64 << 10 // command and env together
	maxEnvName  = 256
	defaultTERM = "xterm-256color"
)

func checkSize(cols, rows int) error {
	if cols < minSize || cols > maxSize || rows < minSize || rows > maxSize {
		return errs.New(errs.InvalidParams, "cols and rows must be between %d and %d, not %dx%d", minSize, maxSize, cols, rows)
	}
	return nil
}

func (h *Termhost) create(ctx context.Context, p CreateParams) (CreateResult, error) {
	if !ptySupported {
		return CreateResult{}, errNotImplemented()
	}
	if err := checkSize(p.Cols, p.Rows); err != nil {
		return CreateResult{}, err
	}
	if err := checkCommand(p.Command, p.Env); err != nil {
		return CreateResult{}, err
	}
	ws, err := h.workspace(ctx, p.ThreadID)
	if err != nil {
		return CreateResult{}, err
	}
	env := terminalEnv(os.Environ(), ws, p.Env)
	command := p.Command
	if command == nil {
		command = []string{loginShell()}
	}
	argv := slices.Clone(command)
	path, err := lookPath(argv[0], ws, envValue(env, "PATH"))
	if err != nil {
		return CreateResult{}, err
	}
	argv[0] = path
	t, err := h.reg.create(spec{threadID: p.ThreadID, argv: argv, command: command, dir: ws, env: env, cols: p.Cols, rows: p.Rows})
	if err != nil {
		return CreateResult{}, err
	}
	return CreateResult{TerminalID: t.id}, nil
}

func (h *Termhost) input(_ context.Context, p InputParams) (api.Empty, error) {
	if len(p.Data) > maxInput {
		return api.Empty{}, errs.New(errs.InvalidParams, "data is %d bytes; send at most %d per call", len(p.Data), maxInput)
	}
	t, err := h.reg.get(p.ThreadID, p.TerminalID)
	if err != nil {
		return api.Empty{}, err
	}
	return api.Empty{}, t.input(p.Data)
}

func (h *Termhost) resize(_ context.Context, p ResizeParams) (api.Empty, error) {
	if err := checkSize(p.Cols, p.Rows); err != nil {
		return api.Empty{}, err
	}
	t, err := h.reg.get(p.ThreadID, p.TerminalID)
	if err != nil {
		return api.Empty{}, err
	}
	return api.Empty{}, t.resize(p.Cols, p.Rows)
}

// close terminates the terminal's process group and answers once it has
// exited (SIGKILL follows closeGrace after SIGHUP/SIGTERM). Closing an
// exited terminal changes nothing; its window stays until evicted.
func (h *Termhost) close(ctx context.Context, p TerminalRef) (Info, error) {
	t, err := h.reg.get(p.ThreadID, p.TerminalID)
	if err != nil {
		return Info{}, err
	}
	t.terminate()
	timer := time.NewTimer(closeGrace + exitDrain + 5*time.Second)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	return t.info(), nil
}

func (h *Termhost) list(ctx context.Context, p ListParams) (ListResult, error) {
	if err := h.threadExists(ctx, p.ThreadID); err != nil {
		return ListResult{}, err
	}
	return ListResult{Terminals: h.reg.list(p.ThreadID)}, nil
}

func (h *Termhost) read(_ context.Context, p ReadParams) (ReadResult, error) {
	offset, limit, through := int64(0), int64(readDefault), int64(-1)
	if p.Offset != nil {
		if *p.Offset < 0 {
			return ReadResult{}, errs.New(errs.InvalidParams, "offset must not be negative")
		}
		offset = *p.Offset
	}
	if p.Limit != nil {
		if *p.Limit < readMin || *p.Limit > readMax {
			return ReadResult{}, errs.New(errs.InvalidParams, "limit must be between %d and %d bytes, not %d", readMin, readMax, *p.Limit)
		}
		limit = *p.Limit
	}
	if p.Through != nil {
		if *p.Through < 0 {
			return ReadResult{}, errs.New(errs.InvalidParams, "through must not be negative")
		}
		through = *p.Through
	}
	t, err := h.reg.get(p.ThreadID, p.TerminalID)
	if err != nil {
		return ReadResult{}, err
	}
	return t.read(offset, limit, through)
}

func errNotImplemented() error {
	return errs.New(errs.NotImplemented, "terminals are not implemented on this platform yet (Windows needs ConPTY)")
}

// checkCommand validates argv and the environment additions.
func checkCommand(command []string, env map[string]string) error {
	size := 0
	if command != nil {
		if len(command) == 0 || command[0] == "" {
			return errs.New(errs.InvalidParams, "command must name a program first; omit it for the login shell")
		}
		if len(command) > maxArgs {
			return errs.New(errs.InvalidParams, "command has %d arguments; the limit is %d", len(command), maxArgs)
		}
		for _, a := range command {
			if strings.IndexByte(a, 0) >= 0 {
				return errs.New(errs.InvalidParams, "command arguments cannot contain NUL")
			}
			size += len(a)
		}
	}
	if len(env) > maxEnv {
		return errs.New(errs.InvalidParams, "env has %d variables; the limit is %d", len(env), maxEnv)
	}
	for k, v := range env {
		if k == "" || len(k) > maxEnvName || strings.ContainsAny(k, "=\x00") || !utf8.ValidString(k) {
			return errs.New(errs.InvalidParams, "env: %q is not a valid variable name (non-empty, at most %d bytes, no \"=\" or NUL)", k, maxEnvName)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return errs.New(errs.InvalidParams, "env: the value of %s contains NUL", k)
		}
		size += len(k) + len(v)
	}
	if size > maxArgvSize {
		return errs.New(errs.InvalidParams, "command and env take %d bytes; the limit is %d", size, maxArgvSize)
	}
	return nil
}

// internalEnv are variables of the service's own activation and
// supervision, which a terminal's programs must not inherit.
var internalEnv = []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC",
	"INVOCATION_ID", "JOURNAL_STREAM", "DEEPCODE_INSTANCE_ID", "DEEPCODE_SUPERVISOR_PID", "DEEPCODE_LIFELINE_FD",
	"DEEPCODE_BOUND_PORT", "DEEPCODE_SERVICES", "DEEPCODE_TRAMPOLINE"}

// terminalEnv is the service's environment without its internal variables,
// with TERM (xterm-256color unless given) and PWD, then the additions.
func terminalEnv(base []string, dir string, extra map[string]string) []string {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range base {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || slices.Contains(internalEnv, k) {
			continue
		}
		set(k, v)
	}
	set("TERM", defaultTERM)
	set("PWD", dir)
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		set(k, extra[k])
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath resolves a program as the terminal's environment would: a name
// with a slash relative to the workspace, otherwise through its PATH.
func lookPath(name, dir, pathEnv string) (string, error) {
	if strings.ContainsRune(name, '/') {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errs.New(errs.NotFound, "command %q not found in PATH", name)
}
