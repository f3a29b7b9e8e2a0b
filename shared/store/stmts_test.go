package store

import (
	"context"
	"path/filepath"
	"testing"
)

func TestPrepared(t *testing.T) {
	db := openTest(t, filepath.Join(t.TempDir(), "s.sqlite3"))
	ctx := context.Background()
	a := db.Prepared(ctx, "SELECT 1")
	if a == nil || db.Prepared(ctx, "SELECT 1") != a {
		t.Fatal("a query is not prepared once and kept")
	}
	if b := db.Prepared(ctx, "SELECT 2"); b == nil || b == a {
		t.Fatal("two queries share a statement")
	}
	var one int
	if err := a.QueryRowContext(ctx).Scan(&one); err != nil || one != 1 {
		t.Fatalf("the prepared statement: %d %v", one, err)
	}
	if db.Prepared(ctx, "SELECT nonsense FROM nowhere") != nil {
		t.Fatal("a query that cannot be prepared gave a statement")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRowContext(ctx).Scan(&one); err == nil {
		t.Fatal("a cached statement outlived Close")
	}
	if db.Prepared(ctx, "SELECT 1") != nil {
		t.Fatal("Prepared after Close gave a statement")
	}
}
