//go:build !windows

package wine

func version() string { return "" }
