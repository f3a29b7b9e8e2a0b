package config

// shellCommand is the built-in "shell" profile's command on Windows, which
// has no /bin/sh: the prompt as a cmd.exe command line. /d skips the
// AutoRun commands of the registry, /s and /c run everything after /c as
// one command line, exactly as written (agentd passes it to cmd.exe
// verbatim, not quoted by Go's rules, which cmd.exe does not follow).
// PowerShell is not the default: it starts several times slower, and a
// profile can name it (["powershell.exe", "-NoProfile", "-Command", "{prompt}"]).
func shellCommand() []string { return []string{"cmd.exe", "/d", "/s", "/c", "{prompt}"} }
