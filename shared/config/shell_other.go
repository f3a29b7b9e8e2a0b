//go:build !windows

package config

// shellCommand is the built-in "shell" profile's command: the prompt as a
// /bin/sh command line.
func shellCommand() []string { return []string{"/bin/sh", "-c", "{prompt}"} }
