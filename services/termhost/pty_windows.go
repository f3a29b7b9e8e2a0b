package termhost

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unsafe"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"golang.org/x/sys/windows"
)

// ptySupported: terminals are Windows pseudo consoles (ConPTY, Windows 10
// 1809 and later), driven through golang.org/x/sys/windows: the maintained
// Go ConPTY packages are either internal to larger modules or unmaintained,
// and what a terminal needs is four calls.
const ptySupported = true

// killedExit is the exit code of a terminal whose processes were killed
// (TerminateJobObject), 128 + SIGKILL as shells report a killed job on Unix.
const killedExit = 128 + 9

// conpty is the terminal's side of a pseudo console: the write end of its
// input pipe and the read end of its output pipe. A pseudo console keeps its
// output pipe open after its last process exits, so a read deadline (the
// reader's exitDrain after the leader's exit) closes the console, which
// flushes what is left and then ends the output with a broken pipe.
type conpty struct {
	in, out *os.File

	mu       sync.Mutex
	console  windows.Handle // 0 once closed
	job      windows.Handle // the terminal's processes; 0 once closed
	deadline *time.Timer
}

func (c *conpty) Read(p []byte) (int, error) { return c.out.Read(p) }

// WriteString writes input. The console host reads its input pipe whether or
// not the program reads its console input, so a write does not wait for the
// program; anonymous pipes take no deadlines (SetWriteDeadline).
func (c *conpty) WriteString(s string) (int, error) { return c.in.WriteString(s) }

func (c *conpty) SetWriteDeadline(time.Time) error { return nil }

// SetReadDeadline closes the console at t: reads then return what the
// console still had, then end.
func (c *conpty) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.deadline = time.AfterFunc(time.Until(t), c.closeConsole)
	return nil
}

// closeConsole closes the pseudo console: its processes get CTRL_CLOSE_EVENT
// (what closing a console window sends: the SIGHUP of Windows), and the
// output pipe ends once its last output is read. ClosePseudoConsole waits for
// that read on older Windows, so it never runs under mu.
func (c *conpty) closeConsole() {
	c.mu.Lock()
	h := c.console
	c.console = 0
	c.mu.Unlock()
	if h != 0 {
		windows.ClosePseudoConsole(h)
	}
}

func (c *conpty) resize(cols, rows int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.console == 0 {
		return errs.New(errs.Conflict, "the terminal has exited")
	}
	if err := windows.ResizePseudoConsole(c.console, windows.Coord{X: int16(cols), Y: int16(rows)}); err != nil {
		return errs.Wrap(err, errs.Internal, "resizing the terminal")
	}
	return nil
}

// Close closes the console and both pipes. The reader alone calls it, once
// its reads have ended.
func (c *conpty) Close() error {
	c.mu.Lock()
	if c.deadline != nil {
		c.deadline.Stop()
	}
	c.mu.Unlock()
	// The reads have ended, so a ClosePseudoConsole that waits for its
	// output to be read would wait forever: close our end of it first.
	err := c.out.Close()
	c.closeConsole()
	c.mu.Lock()
	if c.job != 0 {
		_ = windows.CloseHandle(c.job) // kills what is left (KILL_ON_JOB_CLOSE)
		c.job = 0
	}
	c.mu.Unlock()
	return errors.Join(err, c.in.Close())
}

// kill ends every process of the terminal.
func (c *conpty) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.job != 0 {
		_ = windows.TerminateJobObject(c.job, killedExit)
	}
}

// process is a terminal's leader, in a job object that holds everything it
// starts (close ends the job, as the process group on Unix). The job lives
// as long as the console: closing it (Close) ends what is left.
type process struct {
	h       windows.Handle
	id      int
	console *conpty
}

// conptyAvailable reports the pseudo console API (Windows 10 1809+):
// x/sys/windows panics calling a function the system lacks.
var conptyAvailable = sync.OnceValue(func() bool {
	return windows.NewLazySystemDLL("kernel32.dll").NewProc("CreatePseudoConsole").Find() == nil
})

// startPTY runs argv in dir with env attached to a new pseudo console of the
// given size.
func startPTY(argv []string, dir string, env []string, cols, rows int) (ptyMaster, *process, error) {
	if !conptyAvailable() {
		return nil, nil, errs.New(errs.NotImplemented, "terminals need Windows 10 1809 or later (this Windows has no pseudo console API)")
	}
	var inR, inW, outR, outW windows.Handle
	if err := windows.CreatePipe(&inR, &inW, nil, 0); err != nil {
		return nil, nil, errs.Wrap(err, errs.Overloaded, "cannot open a pseudo console")
	}
	if err := windows.CreatePipe(&outR, &outW, nil, 0); err != nil {
		closeHandles(inR, inW)
		return nil, nil, errs.Wrap(err, errs.Overloaded, "cannot open a pseudo console")
	}
	var hpc windows.Handle
	err := windows.CreatePseudoConsole(windows.Coord{X: int16(cols), Y: int16(rows)}, inR, outW, 0, &hpc)
	// The console host holds its own copies of its ends.
	closeHandles(inR, outW)
	if err != nil {
		closeHandles(inW, outR)
		return nil, nil, errs.Wrap(err, errs.Overloaded, "cannot open a pseudo console")
	}
	c := &conpty{in: os.NewFile(uintptr(inW), "conpty-input"), out: os.NewFile(uintptr(outR), "conpty-output"), console: hpc}
	p, job, err := startAttached(argv, dir, env, hpc)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	c.job, p.console = job, c
	return c, p, nil
}

func startAttached(argv []string, dir string, env []string, hpc windows.Handle) (*process, windows.Handle, error) {
	attrs, err := windows.NewProcThreadAttributeList(1)
	if err != nil {
		return nil, 0, errs.Wrap(err, errs.Internal, "cannot start the terminal's program")
	}
	defer attrs.Delete()
	// The attribute's value is the HPCON itself, not a pointer to it.
	if err := attrs.Update(windows.PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE, *(*unsafe.Pointer)(unsafe.Pointer(&hpc)), unsafe.Sizeof(hpc)); err != nil {
		return nil, 0, errs.Wrap(err, errs.Internal, "cannot attach the pseudo console")
	}
	si := &windows.StartupInfoEx{ProcThreadAttributeList: attrs.List()}
	si.Cb = uint32(unsafe.Sizeof(*si))
	// Null standard handles, explicitly: without STARTF_USESTDHANDLES a
	// program would get termhost's own (redirected) standard handles instead
	// of the pseudo console's (microsoft/terminal#11276).
	si.Flags = windows.STARTF_USESTDHANDLES

	cmdline, err := windows.UTF16PtrFromString(windows.ComposeCommandLine(argv))
	if err != nil {
		return nil, 0, errs.Wrap(err, errs.InvalidParams, "the command contains a NUL byte")
	}
	app, err := windows.UTF16PtrFromString(argv[0])
	if err != nil {
		return nil, 0, errs.Wrap(err, errs.InvalidParams, "the command contains a NUL byte")
	}
	cwd, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return nil, 0, errs.Wrap(err, errs.InvalidParams, "the workspace path contains a NUL byte")
	}
	block, err := envBlock(env)
	if err != nil {
		return nil, 0, err
	}
	job, err := newKillOnCloseJob()
	if err != nil {
		return nil, 0, err
	}
	var pi windows.ProcessInformation
	flags := uint32(windows.EXTENDED_STARTUPINFO_PRESENT | windows.CREATE_UNICODE_ENVIRONMENT | windows.CREATE_SUSPENDED)
	if err := windows.CreateProcess(app, cmdline, nil, nil, false, flags, &block[0], cwd, &si.StartupInfo, &pi); err != nil {
		_ = windows.CloseHandle(job)
		return nil, 0, startError(argv[0], err)
	}
	defer windows.CloseHandle(pi.Thread)
	if err := windows.AssignProcessToJobObject(job, pi.Process); err != nil {
		// Without its job, close could not reach the program's children.
		_ = windows.TerminateProcess(pi.Process, killedExit)
		closeHandles(pi.Process, job)
		return nil, 0, errs.Wrap(err, errs.Internal, "cannot put the terminal's program in its job object")
	}
	if _, err := windows.ResumeThread(pi.Thread); err != nil {
		_ = windows.TerminateJobObject(job, killedExit)
		closeHandles(pi.Process, job)
		return nil, 0, errs.Wrap(err, errs.Internal, "cannot start the terminal's program")
	}
	return &process{h: pi.Process, id: int(pi.ProcessId)}, job, nil
}

// newKillOnCloseJob is a job object that ends every process in it when its
// last handle closes: the terminal's Close ends whatever it started.
func newKillOnCloseJob() (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, errs.Wrap(err, errs.Overloaded, "cannot create the terminal's job object")
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return 0, errs.Wrap(err, errs.Internal, "cannot set up the terminal's job object")
	}
	return job, nil
}

// envBlock is env as CreateProcess takes it: each KEY=value ending in a NUL,
// then one more NUL.
func envBlock(env []string) ([]uint16, error) {
	var b []uint16
	for _, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, errs.New(errs.InvalidParams, "an environment variable contains a NUL byte")
		}
		b = append(b, utf16.Encode([]rune(kv))...)
		b = append(b, 0)
	}
	if len(b) == 0 {
		b = append(b, 0)
	}
	return append(b, 0), nil
}

func closeHandles(hs ...windows.Handle) {
	for _, h := range hs {
		_ = windows.CloseHandle(h)
	}
}

func setSize(m ptyMaster, cols, rows int) error {
	c, ok := m.(*conpty)
	if !ok {
		return errs.New(errs.Internal, "not a pseudo console")
	}
	return c.resize(cols, rows)
}

func (p *process) pid() int { return p.id }

// wait waits for the leader and returns its exit code.
func (p *process) wait() int {
	defer closeHandles(p.h)
	if _, err := windows.WaitForSingleObject(p.h, windows.INFINITE); err != nil {
		return -1
	}
	var code uint32
	if err := windows.GetExitCodeProcess(p.h, &code); err != nil {
		return -1
	}
	return int(int32(code))
}

// hangup closes the pseudo console: every process attached to it gets
// CTRL_CLOSE_EVENT, as when a console window is closed.
func (p *process) hangup() { p.console.closeConsole() }

// kill ends everything the terminal started: the job object.
func (p *process) kill() { p.console.kill() }

// loginShell is the user's command interpreter: %COMSPEC%, else cmd.exe.
func loginShell() string {
	if sh := os.Getenv("COMSPEC"); sh != "" {
		return sh
	}
	return `C:\Windows\System32\cmd.exe`
}

// isEndOfPTY reports the end of the console's output (its host closed the
// pipe) or of its input.
func isEndOfPTY(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, windows.ERROR_BROKEN_PIPE) ||
		errors.Is(err, windows.ERROR_NO_DATA) || errors.Is(err, os.ErrClosed)
}
