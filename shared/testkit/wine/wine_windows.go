package wine

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/windows"
)

var version = sync.OnceValue(func() string {
	proc := windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version")
	if proc.Find() != nil {
		return ""
	}
	r, _, _ := proc.Call()
	if r == 0 {
		return "unknown"
	}
	// r points at a static string in ntdll.
	return windows.BytePtrToString(*(**byte)(unsafe.Pointer(&r)))
})
