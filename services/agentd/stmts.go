package agentd

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds the statement cache. agentd's queries are fixed
// strings, far fewer than this; a query beyond it is simply not cached.
const maxCachedStmts = 256

// stmtCache keeps each query agentd runs prepared. The driver parses the
// SQL of every statement it is given anew, and that parse was the largest
// single cost of a turn's transactions (about a fifth of agentd's CPU on a
// trivial turn). A query is prepared once on the pool; database/sql then
// keeps it prepared on every connection that runs it, and a transaction
// borrows it (tx.Stmt) instead of parsing it again.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, m: map[string]*sql.Stmt{}}
}

// get returns query prepared, or nil when it cannot be (the caller runs it
// unprepared and meets the error there, if any).
func (c *stmtCache) get(ctx context.Context, query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	s, ok := c.m[query]
	full := len(c.m) >= maxCachedStmts
	c.mu.Unlock()
	if ok || full {
		return s
	}
	s, err := c.db.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[query]; ok {
		// Prepared meanwhile by another caller.
		_ = s.Close()
		return old
	}
	c.m[query] = s
	return s
}

// close closes the prepared statements (before the pool is closed).
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, s := range c.m {
		_ = s.Close()
		delete(c.m, q)
	}
}

// cachedDB runs queries on the pool through the cache. It is a querier.
type cachedDB struct {
	db *sql.DB
	c  *stmtCache
}

func (q cachedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := q.c.get(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return q.db.QueryRowContext(ctx, query, args...)
}

func (q cachedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := q.c.get(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return q.db.QueryContext(ctx, query, args...)
}

func (q cachedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := q.c.get(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return q.db.ExecContext(ctx, query, args...)
}
