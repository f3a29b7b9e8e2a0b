package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/godbus/dbus/v5"
)

// Transports a Conn can use.
const (
	ViaSessionBus    = "session-bus"
	ViaPrivateSocket = "private-socket"
)

// Conn is a connection to the user's service manager.
type Conn struct {
	c   *sd.Conn
	via string
}

// Connect reaches the user manager: the session bus when
// DBUS_SESSION_BUS_ADDRESS names one that answers, otherwise the private
// socket in $XDG_RUNTIME_DIR. The error is SERVICE_UNAVAILABLE with what was
// tried.
func Connect(ctx context.Context) (*Conn, error) {
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var tried []string
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") != "" {
		// context.Background: go-systemd ties the connection's life to it.
		c, err := sd.NewUserConnectionContext(context.WithoutCancel(ctx))
		if err == nil {
			// A session bus without a systemd user manager behind it (a
			// dbus-launch'ed bus) does not count.
			if _, perr := c.GetManagerProperty("Version"); perr == nil {
				return &Conn{c: c, via: ViaSessionBus}, nil
			}
			c.Close()
			err = errors.New("no systemd user manager on the session bus")
		}
		tried = append(tried, fmt.Sprintf("the session bus (%v)", err))
	}
	sock := PrivateSocket()
	if sock == "" {
		tried = append(tried, "the private socket (XDG_RUNTIME_DIR is not set)")
	} else {
		c, err := sd.NewConnection(func() (*dbus.Conn, error) { return dialPrivate(dialCtx, sock) })
		if err == nil {
			return &Conn{c: c, via: ViaPrivateSocket}, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", sock, err))
	}
	e := errs.New(errs.ServiceUnavailable, "cannot reach your systemd user manager: tried %s. Run this in a login session (systemctl --user must work), or enable lingering with `loginctl enable-linger`", joinOr(tried))
	e.Retryable = false
	return nil, e
}

func joinOr(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " and "
		}
		out += x
	}
	return out
}

// ConnectPrivate connects to a user manager's private socket at path (tests
// run a private manager beside the real one).
func ConnectPrivate(ctx context.Context, path string) (*Conn, error) {
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := sd.NewConnection(func() (*dbus.Conn, error) { return dialPrivate(dialCtx, path) })
	if err != nil {
		return nil, errs.Wrap(err, errs.ServiceUnavailable, "cannot reach the systemd manager at %s", path)
	}
	return &Conn{c: c, via: ViaPrivateSocket}, nil
}

// PrivateSocket is the user manager's private D-Bus socket, or "".
func PrivateSocket() string {
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" || !filepath.IsAbs(rt) {
		return ""
	}
	return filepath.Join(rt, "systemd", "private")
}

// dialPrivate opens one authenticated connection on the private socket:
// EXTERNAL with our uid, and no Hello (there is no bus daemon to greet).
func dialPrivate(ctx context.Context, path string) (*dbus.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	// No dbus.WithContext: it would close the connection when ctx ends.
	conn, err := dbus.DialUnix(nc.(*net.UnixConn))
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Via says which transport the connection uses.
func (c *Conn) Via() string { return c.via }

// Close closes the connection.
func (c *Conn) Close() { c.c.Close() }

// Version is the manager's systemd version.
func (c *Conn) Version() string {
	v, err := c.c.GetManagerProperty("Version")
	if err != nil {
		return ""
	}
	s, _ := strconv.Unquote(v)
	if s == "" {
		s = v
	}
	return s
}

// UnitPath is the manager's unit search path.
func (c *Conn) UnitPath(ctx context.Context) ([]string, error) {
	v, err := c.c.GetManagerProperty("UnitPath")
	if err != nil {
		return nil, wrap(err, "read the unit search path")
	}
	return parseStringArray(v), nil
}

// parseStringArray reads godbus's text form of an array of strings, whose
// elements are Go-quoted: ["/a", "/b"].
func parseStringArray(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			break
		}
		if u, err := strconv.Unquote(q); err == nil {
			out = append(out, u)
		}
		i += len(q) - 1
	}
	return out
}

// Reload makes the manager re-read unit files (daemon-reload).
func (c *Conn) Reload(ctx context.Context) error {
	return wrap(c.c.ReloadContext(ctx), "reload the unit files")
}

// Start starts unit and waits for its job; a result other than "done" is an
// error naming it.
func (c *Conn) Start(ctx context.Context, unit string) error {
	ch := make(chan string, 1)
	if _, err := c.c.StartUnitContext(ctx, unit, "replace", ch); err != nil {
		return wrap(err, "start "+unit)
	}
	return waitJob(ctx, ch, "start", unit)
}

// Stop stops unit and waits for its job.
func (c *Conn) Stop(ctx context.Context, unit string) error {
	ch := make(chan string, 1)
	if _, err := c.c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
		return wrap(err, "stop "+unit)
	}
	return waitJob(ctx, ch, "stop", unit)
}

// JobError is a job that ended with a result other than "done".
type JobError struct {
	Verb, Unit, Result string
}

func (e *JobError) Error() string {
	return fmt.Sprintf("systemd could not %s %s (job result %q)", e.Verb, e.Unit, e.Result)
}

func waitJob(ctx context.Context, ch <-chan string, verb, unit string) error {
	select {
	case res := <-ch:
		if res == "done" {
			return nil
		}
		return &JobError{Verb: verb, Unit: unit, Result: res}
	case <-ctx.Done():
		return errs.Wrap(ctx.Err(), errs.StartTimeout, "systemd did not finish the %s job of %s in time", verb, unit)
	}
}

// Kill sends signal to the unit's main process.
func (c *Conn) Kill(ctx context.Context, unit string, signal int32) error {
	return wrap(c.c.KillUnitWithTarget(ctx, unit, sd.Main, signal), "signal "+unit)
}

// ResetFailed forgets the failed state of unit (an unknown unit is fine).
func (c *Conn) ResetFailed(ctx context.Context, unit string) {
	_ = c.c.ResetFailedUnitContext(ctx, unit)
}

// Enable enables unit files (the symlinks of their [Install] sections) in
// the user's configuration.
func (c *Conn) Enable(ctx context.Context, units []string) error {
	_, _, err := c.c.EnableUnitFilesContext(ctx, units, false, true)
	return wrap(err, "enable the units")
}

// Disable removes the enablement symlinks of unit files.
func (c *Conn) Disable(ctx context.Context, units []string) error {
	_, err := c.c.DisableUnitFilesContext(ctx, units, false)
	return wrap(err, "disable the units")
}

// UnitState is what deepcode reads about a unit.
type UnitState struct {
	Name             string   `json:"name"`
	LoadState        string   `json:"loadState"`
	ActiveState      string   `json:"activeState"`
	SubState         string   `json:"subState"`
	Result           string   `json:"result,omitempty"`
	MainPID          uint32   `json:"mainPid,omitempty"`
	NRestarts        uint32   `json:"restarts,omitempty"`
	FragmentPath     string   `json:"fragmentPath,omitempty"`
	DropInPaths      []string `json:"dropInPaths,omitempty"`
	UnitFileState    string   `json:"unitFileState,omitempty"`
	NeedDaemonReload bool     `json:"needDaemonReload,omitempty"`
}

// Active reports an active, reloading or activating unit.
func (u UnitState) Active() bool {
	switch u.ActiveState {
	case "active", "reloading", "activating", "deactivating":
		return true
	}
	return false
}

// Unit reads a unit's state (loading it if needed).
func (c *Conn) Unit(ctx context.Context, unit string) (UnitState, error) {
	st := UnitState{Name: unit}
	props, err := c.c.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return st, wrap(err, "read "+unit)
	}
	str := func(k string) string { s, _ := props[k].(string); return s }
	st.LoadState, st.ActiveState, st.SubState = str("LoadState"), str("ActiveState"), str("SubState")
	st.FragmentPath, st.UnitFileState = str("FragmentPath"), str("UnitFileState")
	st.DropInPaths, _ = props["DropInPaths"].([]string)
	st.NeedDaemonReload, _ = props["NeedDaemonReload"].(bool)
	typ := ""
	switch filepath.Ext(unit) {
	case ".service":
		typ = "Service"
	case ".socket":
		typ = "Socket"
	}
	if typ != "" {
		if tp, err := c.c.GetUnitTypePropertiesContext(ctx, unit, typ); err == nil {
			st.Result, _ = tp["Result"].(string)
			st.MainPID, _ = tp["MainPID"].(uint32)
			st.NRestarts, _ = tp["NRestarts"].(uint32)
		}
	}
	return st, nil
}

func wrap(err error, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); ok {
		return err
	}
	var de dbus.Error
	if errors.As(err, &de) {
		msg := de.Name
		if len(de.Body) > 0 {
			if s, ok := de.Body[0].(string); ok {
				msg = s
			}
		}
		return errs.Wrap(err, errs.StartFailed, "systemd could not %s: %s", what, msg)
	}
	return errs.Wrap(err, errs.ServiceUnavailable, "lost the connection to the systemd user manager while trying to %s", what)
}
