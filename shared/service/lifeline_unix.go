//go:build !windows

package service

import (
	"os"
	"strconv"
)

// Outside Windows the supervisor passes the services their listeners
// (LISTEN_FDS); only --foreground binds them.
func bindsOwnSockets(*Service) bool { return false }

// idleExit: an idle on-demand service exits, and socket activation starts
// it again on the next connection.
const idleExit = true

func (s *Service) watchLifeline() {
	fd, err := strconv.Atoi(os.Getenv(EnvLifelineFD))
	_ = os.Unsetenv(EnvLifelineFD)
	if err != nil || fd < 3 {
		return
	}
	setCloseOnExec(fd)
	// Non-blocking, so the runtime poller owns the read and Close ends it.
	setNonblock(fd)
	f := os.NewFile(uintptr(fd), "lifeline")
	if f == nil {
		return
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		buf := make([]byte, 1)
		// The supervisor never writes; EOF means it died or let go of us.
		_, _ = f.Read(buf)
		if s.ctx.Err() == nil {
			parentGone()
			s.parentGone.Store(true)
			s.Log.Warn("the supervisor is gone; stopping at once (no grace: what runs is recovered by the next instance)")
			s.requestStop("supervisor gone")
		}
	}()
	go func() { <-s.ctx.Done(); _ = f.Close() }()
}
