//go:build unix

package termhost

import "golang.org/x/sys/unix"

// allocWindow maps anonymous memory for a window: untouched pages cost
// nothing, and the Go heap (and so its collection goal) stays small however
// many windows are full.
func allocWindow(size int) []byte {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return make([]byte, size)
	}
	return b
}

func freeWindow(b []byte) {
	if err := unix.Munmap(b); err != nil {
		// Not a mapping (the heap fallback): the collector frees it.
		_ = err
	}
}
