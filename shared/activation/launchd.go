package activation

import (
	"errors"
	"net"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// errNotFromLaunchd is what launchFiles returns when launchd holds no socket
// of that name for this process: the process was not started by launchd
// (ESRCH), or its job has no such entry in Sockets (ENOENT; launchd also
// answers ESRCH for that).
var errNotFromLaunchd = errors.New("not a launchd socket of this process")

// launchFiles is the platform's launch_activate_socket; tests replace it.
var launchFiles = launchActivateSocket

// FromLaunchd returns the sockets launchd created for this job's Sockets
// entries named like specs (the LaunchAgent's keys are the Spec names:
// manager, gateway, http, agentd, termhost, scheduler). ok is false when
// launchd passed none of them: the process was not started by launchd, and
// the caller binds its sockets itself. Specs launchd has no entry for are
// absent from the map (the plist omits http when the port is chosen at
// start): the caller binds those. Unlike FromEnvironment it may be called
// again; later calls return new listeners on the same sockets. The socket
// files belong to launchd: never unlink them.
func FromLaunchd(specs []Spec) (got map[string]net.Listener, ok bool, err error) {
	got = map[string]net.Listener{}
	fail := func(err error) (map[string]net.Listener, bool, error) {
		for _, ln := range got {
			_ = ln.Close()
		}
		return nil, true, err
	}
	for _, s := range specs {
		files, err := launchFiles(s.Name)
		if errors.Is(err, errNotFromLaunchd) {
			continue
		}
		if err != nil {
			return fail(errs.Wrap(err, errs.StartFailed, "cannot receive the launchd socket %q", s.Name))
		}
		var ln net.Listener
		for _, f := range files {
			l, err := net.FileListener(f) // a duplicate: f stays with the cache
			if err != nil {
				return fail(errs.Wrap(err, errs.StartFailed, "launchd socket %q is not a stream listener", s.Name))
			}
			if ln == nil && kindOf(l) == s.Kind {
				ln = l
			} else {
				_ = l.Close()
			}
		}
		if ln == nil {
			return fail(errs.New(errs.StartFailed, "launchd passed no %s listener for %q: check the LaunchAgent's Sockets", kindName(s.Kind), s.Name))
		}
		if ul, isUnix := ln.(*net.UnixListener); isUnix {
			ul.SetUnlinkOnClose(false)
		}
		got[s.Name] = ln
	}
	if len(got) == 0 {
		return nil, false, nil
	}
	return got, true, nil
}

func kindName(k Kind) string {
	if k == TCP {
		return "TCP"
	}
	return "Unix"
}
