package launchd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// ErrNotLoaded means the job is not loaded in the domain.
var ErrNotLoaded = errors.New("the LaunchAgent is not loaded")

// launchctl's exit statuses for a job or domain it cannot find: 3 (ESRCH,
// "No such process") from bootout and kickstart, 113 ("Could not find
// service") from print.
var notFoundStatuses = []int{3, 113}

// Launchctl runs launchctl in the user's GUI login domain, gui/<uid>.
type Launchctl struct {
	// Path of launchctl ("" means /bin/launchctl).
	Path string
	// UID of the user whose GUI domain is addressed.
	UID int
}

// Domain is gui/<uid>.
func (c *Launchctl) Domain() string { return "gui/" + strconv.Itoa(c.UID) }

// Target is gui/<uid>/<label>.
func (c *Launchctl) Target(label string) string { return c.Domain() + "/" + label }

func (c *Launchctl) run(ctx context.Context, args ...string) (stdout string, status int, err error) {
	path := c.Path
	if path == "" {
		path = "/bin/launchctl"
	}
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		msg := strings.TrimSpace(errb.String() + " " + out.String())
		return out.String(), ee.ExitCode(), fmt.Errorf("launchctl %s: exit status %d: %s", strings.Join(args, " "), ee.ExitCode(), msg)
	}
	if err != nil {
		return out.String(), -1, errs.Wrap(err, errs.StartFailed, "cannot run %s", path)
	}
	return out.String(), 0, nil
}

func notFound(status int) bool {
	for _, s := range notFoundStatuses {
		if s == status {
			return true
		}
	}
	return false
}

// Bootstrap loads the plist into the GUI domain (launchctl bootstrap
// gui/<uid> <plist>); with RunAtLoad the job starts at once. A job already
// loaded is left as it is (nil): boot it out first to change it.
func (c *Launchctl) Bootstrap(ctx context.Context, plistPath, label string) error {
	if _, err := c.Print(ctx, label); err == nil {
		return nil
	}
	_, _, err := c.run(ctx, "bootstrap", c.Domain(), plistPath)
	if err == nil {
		return nil
	}
	// launchctl reports an already-loaded job with unhelpful statuses (5,
	// 17, 37) depending on the macOS release: ask again before failing.
	if _, perr := c.Print(ctx, label); perr == nil {
		return nil
	}
	return errs.Wrap(err, errs.StartFailed, "launchd did not load %s: %v", plistPath, err)
}

// Bootout unloads the job (launchctl bootout gui/<uid>/<label>): launchd
// sends SIGTERM, then SIGKILL after ExitTimeOut, and the job does not
// restart until it is bootstrapped again (service start, or the next
// login). ErrNotLoaded when it was not loaded.
func (c *Launchctl) Bootout(ctx context.Context, label string) error {
	_, status, err := c.run(ctx, "bootout", c.Target(label))
	if err != nil && notFound(status) {
		return ErrNotLoaded
	}
	if err != nil {
		return errs.Wrap(err, errs.StartFailed, "launchd did not unload %s: %v", label, err)
	}
	return nil
}

// Kickstart starts the loaded job now (launchctl kickstart); with restart
// (-k) a running instance is killed and started again.
func (c *Launchctl) Kickstart(ctx context.Context, label string, restart bool) error {
	args := []string{"kickstart"}
	if restart {
		args = append(args, "-k")
	}
	_, status, err := c.run(ctx, append(args, c.Target(label))...)
	if err != nil && notFound(status) {
		return ErrNotLoaded
	}
	if err != nil {
		return errs.Wrap(err, errs.StartFailed, "launchd did not start %s: %v", label, err)
	}
	return nil
}

// Job is what launchctl print tells about a loaded job.
type Job struct {
	// State: running, waiting (loaded, not running), exited, ...
	State string `json:"state"`
	// PID of the running process, 0 if none.
	PID int `json:"pid,omitempty"`
	// Path of the plist launchd loaded.
	Path string `json:"path,omitempty"`
	// Program launchd runs.
	Program string `json:"program,omitempty"`
	// LastExit is launchd's "last exit code" line, verbatim.
	LastExit string `json:"lastExit,omitempty"`
	// Runs counts the starts since loading.
	Runs int `json:"runs,omitempty"`
}

// Running reports a live process.
func (j *Job) Running() bool { return j.State == "running" && j.PID > 0 }

// Print describes the loaded job (launchctl print gui/<uid>/<label>), or
// ErrNotLoaded. launchctl print's format is not a stable interface: only the
// job's top-level "key = value" lines are read, and unknown ones ignored.
func (c *Launchctl) Print(ctx context.Context, label string) (*Job, error) {
	out, status, err := c.run(ctx, "print", c.Target(label))
	if err != nil && notFound(status) {
		return nil, ErrNotLoaded
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.ServiceUnavailable, "cannot ask launchd about %s: %v", label, err)
	}
	return parsePrint(out), nil
}

// DomainReady checks that the user's GUI login domain exists (the user is
// logged in at the console; a LaunchAgent cannot run otherwise).
func (c *Launchctl) DomainReady(ctx context.Context) error {
	if _, _, err := c.run(ctx, "print", c.Domain()); err != nil {
		return errs.Wrap(err, errs.ServiceUnavailable,
			"the GUI login domain %s is not available (is the user logged in at the console?): %v", c.Domain(), err)
	}
	return nil
}

func parsePrint(out string) *Job {
	j := &Job{}
	for _, line := range strings.Split(out, "\n") {
		// Top-level properties are indented by exactly one tab.
		if !strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "\t\t") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimSpace(line), " = ")
		if !ok {
			continue
		}
		switch k {
		case "state":
			j.State = v
		case "pid":
			j.PID, _ = strconv.Atoi(v)
		case "path":
			j.Path = v
		case "program":
			j.Program = v
		case "last exit code":
			j.LastExit = v
		case "runs":
			j.Runs, _ = strconv.Atoi(v)
		}
	}
	return j
}
