package supervisor

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/service"
	"golang.org/x/sys/windows"
)

const exeSuffix = ".exe"

// startsOnDemand: a pipe listener cannot be handed to a child, so every
// service starts at once (supervisor_windows.go).
const startsOnDemand = false

// waitReadable is never called on Windows (startsOnDemand is false).
func waitReadable(net.Listener, <-chan struct{}) (bool, error) {
	return false, errs.New(errs.NotImplemented, "services do not start on demand on Windows")
}

// command is the child's start: its own binary, binding its own pipe, with
// the read end of a new lifeline as an inherited handle, and for the
// manager the write end of the stop-request pipe. It gets no console window.
func (c *childProc) command() (*exec.Cmd, *childRun, error) {
	s := c.sup
	lr, lw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	run := &childRun{stopRequested: s.stopRequests, lifeline: lw, childEnds: []*os.File{lr}}
	cmd := exec.Command(c.bin, "--database", s.layout.Database, "--log-level", s.cfg.Log.Level)
	cmd.Env = append(childEnviron(), c.supervisionEnv(handleOf(lr))...)
	if c.spec.Name == "manager" {
		sr, sw, err := os.Pipe()
		if err != nil {
			run.started(nil, err)
			run.release()
			return nil, nil, err
		}
		run.stopRequests, run.childEnds = sr, append(run.childEnds, sw)
		cmd.Env = append(cmd.Env, service.EnvStopRequestFD+"="+handleOf(sw))
	}
	handles := make([]syscall.Handle, 0, len(run.childEnds))
	for _, f := range run.childEnds {
		handles = append(handles, syscall.Handle(f.Fd()))
	}
	// os.Pipe's handles are inheritable; the supervisor's own ends must
	// never reach a child, or that child's lifeline would not end.
	noInherit(run.lifeline)
	noInherit(run.stopRequests)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		CreationFlags:              windows.CREATE_NO_WINDOW | windows.CREATE_NEW_PROCESS_GROUP,
		AdditionalInheritedHandles: handles,
	}
	return cmd, run, nil
}

// childRun is one run of a child on Windows.
type childRun struct {
	lifeline      *os.File   // write end: closing it asks the child to stop
	childEnds     []*os.File // the child's ends, closed here once it started
	stopRequests  *os.File   // the manager's stop requests (read end)
	stopRequested chan<- struct{}
	job           windows.Handle // the child and whatever it starts
}

// started closes the supervisor's copies of the child's handles, puts the
// child in its own job object and follows the manager's stop requests.
func (r *childRun) started(cmd *exec.Cmd, err error) {
	for _, f := range r.childEnds {
		_ = f.Close()
	}
	r.childEnds = nil
	if err != nil {
		return
	}
	r.job = newJob(cmd.Process.Pid)
	if r.stopRequests != nil {
		go forwardStopRequests(r.stopRequests, r.stopRequested)
	}
}

func (r *childRun) release() {
	_ = r.lifeline.Close()
	if r.stopRequests != nil {
		_ = r.stopRequests.Close()
	}
	if r.job != 0 {
		_ = windows.CloseHandle(r.job)
		r.job = 0
	}
}

// terminate asks the child to stop gracefully: its lifeline ends.
func (r *childRun) terminate(*exec.Cmd) { _ = r.lifeline.Close() }

// kill ends the child and whatever it started.
func (r *childRun) kill(cmd *exec.Cmd) {
	if r.job != 0 && windows.TerminateJobObject(r.job, 1) == nil {
		return
	}
	_ = cmd.Process.Kill()
}

// forwardStopRequests passes each byte the manager writes on as a request
// to stop the instance; end of file is the manager's exit (a crash is
// restarted, not a stop).
func forwardStopRequests(f *os.File, stop chan<- struct{}) {
	buf := make([]byte, 1)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			select {
			case stop <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// newJob puts pid in a new job object, so that a forced stop ends its own
// children as well (the Unix supervisor kills the process group); 0 if the
// job cannot be made, and then only the child is killed. The job does not
// kill on close: when the supervisor dies, the services stop gracefully on
// their lifelines instead.
func newJob(pid int) windows.Handle {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0
	}
	p, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		_ = windows.CloseHandle(job)
		return 0
	}
	defer windows.CloseHandle(p)
	if err := windows.AssignProcessToJobObject(job, p); err != nil {
		_ = windows.CloseHandle(job)
		return 0
	}
	return job
}

func handleOf(f *os.File) string { return strconv.FormatUint(uint64(f.Fd()), 10) }

func noInherit(f *os.File) {
	if f != nil {
		_ = windows.SetHandleInformation(windows.Handle(f.Fd()), windows.HANDLE_FLAG_INHERIT, 0)
	}
}
