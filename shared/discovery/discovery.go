// Package discovery reads and writes the files beside the database that let
// clients find and authenticate an instance: instance.json (public identity),
// token (0600 secret), and the two locks.
package discovery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"github.com/deepcode-dev/deepcode/shared/topology"
	"os"
	"strconv"
	"time"

	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/fsutil"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/gofrs/flock"
)

// Instance is the public description of a running instance. A PID alone
// never proves identity: clients check InstanceID through the HMAC
// challenge.
type Instance struct {
	InstanceID      string            `json:"instanceId"`
	Database        string            `json:"database"`
	DBID            string            `json:"dbId"`
	PID             int               `json:"pid"`
	Port            int               `json:"port"`
	Address         string            `json:"address"`
	Sockets         map[string]string `json:"sockets"`
	ProtocolVersion string            `json:"protocolVersion"`
	Version         string            `json:"version"`
	Activation      string            `json:"activation"`
	StartedAt       time.Time         `json:"startedAt"`
}

// NewInstanceID makes a fresh instance id.
func NewInstanceID() string { return "inst_" + randomHex(12) }

// NewToken makes a fresh 256-bit management token.
func NewToken() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// WriteInstance writes instance.json atomically (0600: it names sockets).
func WriteInstance(l *paths.Layout, inst *Instance) error {
	b, err := json.MarshalIndent(inst, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(l.InstanceJSON(), append(b, '\n'), 0o600)
}

// ReadInstance reads instance.json; a missing file is SERVICE_NOT_RUNNING.
func ReadInstance(l *paths.Layout) (*Instance, error) {
	b, err := os.ReadFile(l.InstanceJSON())
	if errors.Is(err, os.ErrNotExist) {
		return nil, errs.New(errs.ServiceNotRunning, "no service is running for %s", l.Database)
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot read %s", l.InstanceJSON())
	}
	var inst Instance
	if err := json.Unmarshal(b, &inst); err != nil || inst.InstanceID == "" {
		return nil, errs.New(errs.ServiceNotRunning, "%s is damaged; start the service again", l.InstanceJSON())
	}
	return &inst, nil
}

// RemoveInstance removes instance.json only if it still describes id, so a
// stopping instance never erases its replacement's file.
func RemoveInstance(l *paths.Layout, id string) {
	if inst, err := ReadInstance(l); err == nil && inst.InstanceID == id {
		_ = os.Remove(l.InstanceJSON())
	}
}

// WriteToken writes the management token (0600, atomic).
func WriteToken(l *paths.Layout, token string) error {
	return fsutil.WriteFileAtomic(l.Token(), []byte(token+"\n"), 0o600)
}

// ReadToken reads the management token.
func ReadToken(l *paths.Layout) (string, error) {
	b, err := os.ReadFile(l.Token())
	if errors.Is(err, os.ErrNotExist) {
		return "", errs.New(errs.ServiceNotRunning, "no service token at %s: the service is not running", l.Token())
	}
	if err != nil {
		return "", errs.Wrap(err, errs.Unauthorized, "cannot read the service token %s", l.Token())
	}
	tok := string(b)
	for len(tok) > 0 && (tok[len(tok)-1] == '\n' || tok[len(tok)-1] == '\r') {
		tok = tok[:len(tok)-1]
	}
	if len(tok) < 32 {
		return "", errs.New(errs.Unauthorized, "the service token %s is damaged: restart the service", l.Token())
	}
	return tok, nil
}

// RemoveTokenIf removes the token file if it still holds token.
func RemoveTokenIf(l *paths.Layout, token string) {
	if cur, err := ReadToken(l); err == nil && cur == token {
		_ = os.Remove(l.Token())
	}
}

// Lock is a held file lock.
type Lock struct{ f *flock.Flock }

// Release unlocks and closes the lock file (the file itself stays: removing
// it would let two holders lock two different inodes).
func (k *Lock) Release() {
	if k != nil && k.f != nil {
		_ = k.f.Unlock()
	}
}

// TryInstanceLock takes instance.lock, the lifetime lease of the instance's
// root process, waiting at most wait for a holder that is just exiting. It
// returns ALREADY_RUNNING if another live process holds it. A lock file left
// by a dead process is simply free: the kernel released it.
func TryInstanceLock(ctx context.Context, l *paths.Layout, wait time.Duration) (*Lock, error) {
	f := flock.New(l.InstanceLock(), flock.SetPermissions(0o600))
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ok, err := f.TryLock()
	if err == nil && !ok && wait > 0 {
		ok, err = f.TryLockContext(ctx, 20*time.Millisecond)
		if errors.Is(err, context.DeadlineExceeded) {
			err = nil
		}
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "cannot lock %s", l.InstanceLock())
	}
	if !ok {
		_ = f.Close()
		return nil, errs.New(errs.AlreadyRunning, "another deepcode instance holds %s", l.InstanceLock())
	}
	return &Lock{f: f}, nil
}

// InstanceLockHeld reports whether some process holds instance.lock, without
// keeping it.
func InstanceLockHeld(l *paths.Layout) bool {
	if _, err := os.Stat(l.InstanceLock()); err != nil {
		return false
	}
	f := flock.New(l.InstanceLock(), flock.SetPermissions(0o600))
	ok, err := f.TryLock()
	if err != nil {
		return false
	}
	if ok {
		_ = f.Unlock()
		return false
	}
	_ = f.Close()
	return true
}

// ManagementLock serialises start, stop, install, uninstall and restart.
// waiting is called once if the lock is busy, so the caller can show
// progress.
func ManagementLock(ctx context.Context, l *paths.Layout, waiting func()) (*Lock, error) {
	if err := l.EnsureServiceDir(); err != nil {
		return nil, err
	}
	f := flock.New(l.ManagementLock(), flock.SetPermissions(0o600))
	ok, err := f.TryLock()
	if err == nil && !ok {
		if waiting != nil {
			waiting()
		}
		ok, err = f.TryLockContext(ctx, 25*time.Millisecond)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.Wrap(err, errs.StartTimeout, "another deepcode command is managing this service; try again when it has finished")
		}
		return nil, errs.Wrap(err, errs.Internal, "cannot lock %s", l.ManagementLock())
	}
	if !ok {
		return nil, errs.New(errs.StartTimeout, "another deepcode command is managing this service; try again when it has finished")
	}
	return &Lock{f: f}, nil
}

// NewInstance describes an instance of l's database whose root process is
// pid, serving the gateway on port. Its sockets are where clients connect:
// the socket paths, or on Windows the named pipes that stand for them.
func NewInstance(l *paths.Layout, instanceID string, pid, port int, activation string) *Instance {
	inst := &Instance{
		InstanceID:      instanceID,
		Database:        l.Database,
		DBID:            l.DBID,
		PID:             pid,
		Port:            port,
		Sockets:         sockets(l),
		ProtocolVersion: buildinfo.ProtocolVersion,
		Version:         buildinfo.Version,
		Activation:      activation,
		StartedAt:       time.Now().UTC().Truncate(time.Millisecond),
	}
	if port > 0 {
		inst.Address = "127.0.0.1:" + strconv.Itoa(port)
	}
	return inst
}

// sockets maps each service to the address clients dial: its first Unix
// socket (a named pipe on Windows).
func sockets(l *paths.Layout) map[string]string {
	out := map[string]string{}
	for _, ts := range topology.Services {
		for _, so := range ts.Sockets {
			if so.File != "" {
				out[ts.Name] = socketAddress(l, so.File)
				break
			}
		}
	}
	return out
}
