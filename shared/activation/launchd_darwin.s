// Trampolines to libSystem's launch_activate_socket and free, imported with
// go:cgo_import_dynamic in launchd_darwin.go (the same pattern as
// golang.org/x/sys/unix on darwin). JMP assembles on amd64 and arm64 alike.

#include "textflag.h"

TEXT launch_activate_socket_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_launch_activate_socket(SB)

GLOBL	·launchActivateSocketTrampolineAddr(SB), RODATA, $8
DATA	·launchActivateSocketTrampolineAddr(SB)/8, $launch_activate_socket_trampoline<>(SB)

TEXT free_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_free(SB)

GLOBL	·freeTrampolineAddr(SB), RODATA, $8
DATA	·freeTrampolineAddr(SB)/8, $free_trampoline<>(SB)
