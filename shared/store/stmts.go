package store

import (
	"context"
	"database/sql"
)

// maxCachedStmts bounds a DB's statement cache. The services' queries are
// fixed strings, far fewer than this; a query beyond it is simply not
// cached.
const maxCachedStmts = 256

// Prepared returns query prepared once on the pool and kept until Close, or
// nil when it cannot be prepared (the caller runs it unprepared and meets
// the error there, if any). The driver parses the SQL of every statement it
// is given anew, and that parse was the largest single cost of agentd's
// transactions (about a fifth of its CPU on a trivial turn); database/sql
// keeps a prepared statement prepared on every connection that runs it,
// and a transaction borrows it (tx.StmtContext) instead of parsing it.
func (db *DB) Prepared(ctx context.Context, query string) *sql.Stmt {
	db.stmtMu.Lock()
	s, ok := db.stmts[query]
	full := len(db.stmts) >= maxCachedStmts
	closed := db.stmts == nil
	db.stmtMu.Unlock()
	if ok || full || closed {
		return s
	}
	s, err := db.sql.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return nil
	}
	db.stmtMu.Lock()
	defer db.stmtMu.Unlock()
	if old, ok := db.stmts[query]; ok || db.stmts == nil {
		// Prepared meanwhile by another caller, or the DB closed.
		_ = s.Close()
		return old
	}
	db.stmts[query] = s
	return s
}

// closeStmts closes the cached statements; later Prepared calls return nil.
func (db *DB) closeStmts() {
	db.stmtMu.Lock()
	defer db.stmtMu.Unlock()
	for _, s := range db.stmts {
		_ = s.Close()
	}
	db.stmts = nil
}
