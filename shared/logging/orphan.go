package logging

import (
	"io"
	"os"
	"sync"
)

// NewSupervisedWriter is the log writer of a service that the supervisor
// started. Records go to w, the service's stderr, which the supervisor
// copies into the log at path (one process rotates it). When a write to w
// fails, the supervisor is gone (a pipe without a reader: EPIPE, SIGPIPE
// being caught by the service skeleton), and that record and every later one
// are appended to path directly: what a service does after its supervisor
// died ("the supervisor is gone; stopping", its stop) is still in the log.
//
// The file is opened for appending only, never rotated from here: the next
// supervisor rotates it, and a line appended with O_APPEND lands whole
// beside the lines other processes append.
func NewSupervisedWriter(w io.Writer, path string) *SupervisedWriter {
	return &SupervisedWriter{w: w, path: path}
}

// SupervisedWriter is what NewSupervisedWriter returns.
type SupervisedWriter struct {
	mu       sync.Mutex
	w        io.Writer
	path     string
	detached bool
	f        *os.File
}

func (s *SupervisedWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.detached {
		if _, err := s.w.Write(p); err == nil {
			return len(p), nil
		}
		s.detached = true
	}
	if s.f == nil {
		f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return 0, err
		}
		s.f = f
	}
	return s.f.Write(p)
}

func (s *SupervisedWriter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		err := s.f.Close()
		s.f = nil
		return err
	}
	return nil
}

// Detach makes every later record go to the file. A service calls it as
// soon as it learns that its supervisor is gone: the pipe's read end may
// still be open for a moment while the dead supervisor's descriptors are
// closed, and a record written into it then is lost without an error.
func (s *SupervisedWriter) Detach() {
	s.mu.Lock()
	s.detached = true
	s.mu.Unlock()
}
