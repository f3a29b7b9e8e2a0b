// Package ids makes and checks the ids of deepcode's records (threads,
// turns, items, approvals, terminals, automations, runs): a type prefix and
// 16 lower-case base32 characters of crypto/rand (80 bits). One scheme for
// every service, so a client can tell a malformed id from an unknown one
// the same way everywhere; nothing ever resolves an id from a prefix of it.
package ids

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

// Len is the length of an id after its prefix.
const Len = 16

var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// New makes an id with the type prefix (e.g. "thr_").
func New(prefix string) string {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return prefix + encoding.EncodeToString(b[:])
}

// Valid reports whether id has the prefix and the shape New makes. A
// malformed or foreign id (a provider's session id, say) is simply not
// found by the caller.
func Valid(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != Len {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
