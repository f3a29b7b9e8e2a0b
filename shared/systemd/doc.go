// Package systemd controls the user's systemd manager over D-Bus (go-systemd
// and godbus, never by parsing systemctl's output): the session bus where
// there is one, otherwise the manager's private socket
// $XDG_RUNTIME_DIR/systemd/private (EXTERNAL authentication, no Hello), which
// works without dbus-daemon, as in containers and minimal sessions.
//
// The package is Linux-only; on other systems it holds nothing.
package systemd
