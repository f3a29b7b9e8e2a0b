package termhost

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// Terminal ids use agentd's scheme (services/agentd/model.go): a type
// prefix and 16 lowercase base32 characters of crypto/rand. The copy is
// kept small and local on purpose.
const (
	terminalPrefix = "term_"
	threadPrefix   = "thr_"
)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID(prefix string) string {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + idEncoding.EncodeToString(b)
}

// validID checks an id's prefix and shape; nothing ever resolves a prefix
// of an id, so a malformed id is simply not found.
func validID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 16 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
