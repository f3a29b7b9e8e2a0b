// Package schema holds deepcode's SQLite schema history: the embedded,
// numbered migrations and the version they bring a database to. It is
// apart from the store so that a binary that only needs the version (the
// manager reports it) does not link the SQLite engine.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// files holds the schema history: migrations/NNNN_<name>.sql, numbered from
// 0001 without gaps. Later services add files here; never edit or renumber a
// released one.
//
//go:embed migrations/*.sql
var files embed.FS

// Migration is one step of the schema history.
type Migration struct {
	Version int
	Name    string // file name, for messages
	SQL     string
}

var migrationName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9][a-z0-9_]*)\.sql$`)

var load = sync.OnceValues(func() ([]Migration, error) {
	return Parse(files, "migrations")
})

// Load returns the embedded migrations in order (parsed once).
func Load() ([]Migration, error) { return load() }

// Parse reads the migrations in dir of fsys and checks their numbering.
func Parse(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q is not named NNNN_<name>.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(body)) == "" {
			return nil, fmt.Errorf("migration file %q is empty", e.Name())
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q: expected version %04d (versions start at 0001 and have no gaps or duplicates)", m.Name, i+1)
		}
	}
	return ms, nil
}

// Latest is the highest embedded migration: the user_version every service
// of this build runs its database at (it migrates an older one, and refuses
// a newer one with SCHEMA_TOO_NEW).
func Latest() int {
	ms, err := Load()
	if err != nil {
		return 0
	}
	return len(ms)
}
