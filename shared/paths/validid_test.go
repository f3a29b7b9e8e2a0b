package paths

import (
	"regexp"
	"testing"
)

// FuzzValidDatabaseID: the check is the pattern ^[a-z0-9]+$ it replaced,
// and every id DatabaseID makes passes it.
func FuzzValidDatabaseID(f *testing.F) {
	re := regexp.MustCompile(`^[a-z0-9]+$`)
	for _, s := range []string{"", "a", "0", "abcdef234567", "A", "a-b", "a_b", "é", "a\x00", " a", DatabaseID("/x/deepcode.sqlite3")} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidDatabaseID(id), re.MatchString(id); got != want {
			t.Errorf("ValidDatabaseID(%q) = %v, the pattern says %v", id, got, want)
		}
		if made := DatabaseID(id); !ValidDatabaseID(made) {
			t.Errorf("DatabaseID(%q) = %q fails ValidDatabaseID", id, made)
		}
	})
}
