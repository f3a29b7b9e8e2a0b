package termhost

import (
	"github.com/deepcode-dev/deepcode/shared/ids"
)

// Terminal ids have the scheme of every record's id (shared/ids).
const (
	terminalPrefix = "term_"
	threadPrefix   = "thr_"
)

func newID(prefix string) string { return ids.New(prefix) }

// validID checks an id's prefix and shape; nothing ever resolves a prefix
// of an id, so a malformed id is simply not found.
func validID(prefix, id string) bool { return ids.Valid(prefix, id) }
