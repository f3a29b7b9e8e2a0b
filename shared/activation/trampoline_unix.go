//go:build !windows

package activation

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func execTrampoline(target string) int {
	_ = os.Unsetenv(EnvTrampoline)
	_ = os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	args := append([]string{target}, os.Args[1:]...)
	err := syscall.Exec(target, args, os.Environ())
	fmt.Fprintf(os.Stderr, "deepcode-supervisor: cannot start %s: %v\n", target, err)
	return 1
}
