package activation

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// launch_activate_socket(3) and free(3) are called in libSystem without cgo,
// through the same trampolines golang.org/x/sys/unix uses, so that darwin
// builds cross-compile from any system (see launchd_darwin.s).

//go:cgo_import_dynamic libc_launch_activate_socket launch_activate_socket "/usr/lib/libSystem.B.dylib"
//go:cgo_import_dynamic libc_free free "/usr/lib/libSystem.B.dylib"

var (
	launchActivateSocketTrampolineAddr uintptr
	freeTrampolineAddr                 uintptr
)

// syscall_syscall is the runtime's libc call, the one golang.org/x/sys/unix
// links to on darwin. Its r1 is the C function's return value.
//
//go:linkname syscall_syscall syscall.syscall
func syscall_syscall(fn, a1, a2, a3 uintptr) (r1, r2 uintptr, err syscall.Errno)

// launchdSockets keeps the descriptors launchd handed over, by name:
// launch_activate_socket answers EALREADY to a second call for the same
// name, so later calls are served from here. The files stay open (and
// close-on-exec) for the process's life; listeners are duplicates.
var launchdSockets struct {
	sync.Mutex
	files map[string][]*os.File
}

func launchActivateSocket(name string) ([]*os.File, error) {
	launchdSockets.Lock()
	defer launchdSockets.Unlock()
	if fs, ok := launchdSockets.files[name]; ok {
		return fs, nil
	}
	fds, err := activate(name)
	if err != nil {
		return nil, err
	}
	files := make([]*os.File, 0, len(fds))
	for _, fd := range fds {
		syscall.CloseOnExec(int(fd))
		files = append(files, os.NewFile(uintptr(fd), "launchd:"+name))
	}
	if launchdSockets.files == nil {
		launchdSockets.files = map[string][]*os.File{}
	}
	launchdSockets.files[name] = files
	return files, nil
}

// activate calls int launch_activate_socket(const char *name, int **fds,
// size_t *cnt), which returns 0 or an errno value (not -1 and errno).
func activate(name string) ([]int32, error) {
	cname, err := syscall.BytePtrFromString(name)
	if err != nil {
		return nil, fmt.Errorf("invalid launchd socket name %q: %w", name, err)
	}
	var fds *int32
	var cnt uint64
	var pin runtime.Pinner
	pin.Pin(cname)
	pin.Pin(&fds)
	pin.Pin(&cnt)
	defer pin.Unpin()
	r1, _, e1 := syscall_syscall(launchActivateSocketTrampolineAddr,
		uintptr(unsafe.Pointer(cname)), uintptr(unsafe.Pointer(&fds)), uintptr(unsafe.Pointer(&cnt)))
	if e1 != 0 {
		return nil, fmt.Errorf("launch_activate_socket(%q): %w", name, e1)
	}
	switch syscall.Errno(r1) {
	case 0:
	case syscall.ESRCH, syscall.ENOENT:
		// ESRCH: not started by launchd (launchd also answers it for a
		// name missing from the job); ENOENT: no such socket in the job.
		return nil, errNotFromLaunchd
	case syscall.EALREADY:
		return nil, fmt.Errorf("launch_activate_socket(%q): the socket was already taken by other code in this process: %w", name, syscall.EALREADY)
	default:
		return nil, fmt.Errorf("launch_activate_socket(%q): %w", name, syscall.Errno(r1))
	}
	if fds == nil {
		return nil, errNotFromLaunchd
	}
	out := append([]int32(nil), unsafe.Slice(fds, int(cnt))...)
	_, _, _ = syscall_syscall(freeTrampolineAddr, uintptr(unsafe.Pointer(fds)), 0, 0)
	return out, nil
}
