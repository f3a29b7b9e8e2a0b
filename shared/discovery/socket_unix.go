//go:build !windows

package discovery

import "github.com/deepcode-dev/deepcode/shared/paths"

// socketAddress is where clients reach the socket file of l: its path.
func socketAddress(l *paths.Layout, file string) string { return l.Socket(file) }
