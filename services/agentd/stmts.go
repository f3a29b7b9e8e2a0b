package agentd

import (
	"context"
	"database/sql"

	"github.com/deepcode-dev/deepcode/shared/store"
)

// cachedDB runs queries on the pool prepared once (store.DB.Prepared). It
// is a querier.
type cachedDB struct{ db *store.DB }

func (q cachedDB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := q.db.Prepared(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return q.db.SQL().QueryRowContext(ctx, query, args...)
}

func (q cachedDB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := q.db.Prepared(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return q.db.SQL().QueryContext(ctx, query, args...)
}

func (q cachedDB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := q.db.Prepared(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return q.db.SQL().ExecContext(ctx, query, args...)
}
