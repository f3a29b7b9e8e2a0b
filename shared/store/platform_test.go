package store

import "runtime"

func isUnixLike() bool {
	return runtime.GOOS != "windows" && runtime.GOOS != "plan9" && runtime.GOOS != "js" && runtime.GOOS != "wasip1"
}
