//go:build !unix

package termhost

func allocWindow(size int) []byte { return make([]byte, size) }

func freeWindow([]byte) {}
