package native

const GroupArg = "__deepcode-group"

func groupExec([]string) int { return 126 }

// groupArgv: Windows has no process groups to stop.
func groupArgv(argv []string) []string { return argv }
