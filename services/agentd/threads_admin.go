package agentd

import (
	"context"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Limits of the thread list's own methods.
const (
	maxQuery      = 256
	snippetRadius = 60
)

type (
	ThreadRenameParams  = api.ThreadRenameParams
	ThreadArchiveParams = api.ThreadArchiveParams
	ThreadSearchParams  = api.ThreadSearchParams
	SearchHit           = api.SearchHit
	WorkspaceInfo       = api.WorkspaceInfo
	ProfileInfo         = api.ProfileInfo
)

func (a *Agentd) threadAdminMethods(mux *rpc.Mux) {
	mux.Handle(api.MethodThreadRename, rpc.Method(a.threadRename))
	mux.Handle(api.MethodThreadArchive, rpc.Method(a.threadArchive))
	mux.Handle(api.MethodThreadSearch, rpc.Method(a.threadSearch))
	mux.Handle(api.MethodWorkspaceList, rpc.Method(a.workspaceList))
	mux.Handle(api.MethodProfileList, rpc.Method(func(ctx context.Context, _ api.Empty) (api.ProfileListResult, error) {
		def := a.cfg.DefaultProfile()
		out := []ProfileInfo{}
		for name, p := range a.cfg.Profiles {
			out = append(out, ProfileInfo{Name: name, Provider: p.Provider, Model: p.Model, Default: name == def})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return api.ProfileListResult{Profiles: out}, nil
	}))
}

// checkTitle accepts 0 to maxTitle bytes of UTF-8 without control characters.
func checkTitle(title string) error {
	if len(title) > maxTitle || !utf8.ValidString(title) || strings.ContainsFunc(title, unicode.IsControl) {
		return errs.New(errs.InvalidParams, "title must be at most %d bytes of text without control characters", maxTitle)
	}
	return nil
}

func (a *Agentd) threadRename(ctx context.Context, p ThreadRenameParams) (api.ThreadResult, error) {
	if err := a.requireOwner(); err != nil {
		return api.ThreadResult{}, err
	}
	p.Title = strings.TrimSpace(p.Title)
	if err := checkTitle(p.Title); err != nil {
		return api.ThreadResult{}, err
	}
	if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
		return api.ThreadResult{}, err
	}
	var th Thread
	err := a.j.do(ctx, func(w *txw) error {
		// The list is ordered by activity: a rename is not activity, so
		// updated_at stays.
		if _, err := w.Exec(`UPDATE threads SET title = ? WHERE id = ?`, p.Title, p.ThreadID); err != nil {
			return err
		}
		var err error
		th, err = getThread(ctx, w, p.ThreadID)
		if err == nil {
			w.transcribe(api.TranscriptRecord{Type: api.RecordThreadUpdated, ThreadID: p.ThreadID,
				Thread: &api.TranscriptThread{Title: th.Title, Archived: th.Archived}})
		}
		return err
	})
	if err != nil {
		return api.ThreadResult{}, err
	}
	return api.ThreadResult{Thread: th}, nil
}

func (a *Agentd) threadArchive(ctx context.Context, p ThreadArchiveParams) (api.ThreadResult, error) {
	if err := a.requireOwner(); err != nil {
		return api.ThreadResult{}, err
	}
	archive := p.Archived == nil || *p.Archived
	if _, err := getThread(ctx, a.e.q, p.ThreadID); err != nil {
		return api.ThreadResult{}, err
	}
	var th Thread
	err := a.j.do(ctx, func(w *txw) error {
		var err error
		if archive {
			_, err = w.Exec(`UPDATE threads SET archived_at = ? WHERE id = ? AND archived_at IS NULL`, ms(w.now), p.ThreadID)
		} else {
			_, err = w.Exec(`UPDATE threads SET archived_at = NULL WHERE id = ?`, p.ThreadID)
		}
		if err != nil {
			return err
		}
		th, err = getThread(ctx, w, p.ThreadID)
		if err == nil {
			w.transcribe(api.TranscriptRecord{Type: api.RecordThreadUpdated, ThreadID: p.ThreadID,
				Thread: &api.TranscriptThread{Title: th.Title, Archived: th.Archived}})
		}
		return err
	})
	if err != nil {
		return api.ThreadResult{}, err
	}
	return api.ThreadResult{Thread: th}, nil
}

// likePattern is a LIKE pattern matching s anywhere, with \ as the escape.
func likePattern(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(s) + "%"
}

func (a *Agentd) threadSearch(ctx context.Context, p ThreadSearchParams) (api.ThreadSearchResult, error) {
	q := strings.TrimSpace(p.Query)
	if q == "" || len(q) > maxQuery || !utf8.ValidString(q) {
		return api.ThreadSearchResult{}, errs.New(errs.InvalidParams, "query must be 1 to %d bytes of text", maxQuery)
	}
	limit, err := pageLimit(p.Limit, 20, 100)
	if err != nil {
		return api.ThreadSearchResult{}, err
	}
	pat := likePattern(q)
	// Titles first, then messages; newest activity first within each.
	rows, err := a.e.q.QueryContext(ctx, `
		SELECT id, field, text FROM (
			SELECT t.id AS id, 'title' AS field, '' AS text, 0 AS rank, t.updated_at AS updated
			  FROM threads t WHERE t.archived_at IS NULL AND t.kind = 'thread' AND t.title LIKE ?1 ESCAPE '\'
			UNION ALL
			SELECT t.id, 'text', (SELECT json_extract(i.payload, '$.text') FROM items i
			                        WHERE i.thread_id = t.id AND i.kind IN ('userMessage', 'agentMessage')
			                          AND json_extract(i.payload, '$.text') LIKE ?1 ESCAPE '\'
			                        ORDER BY i.created_at DESC LIMIT 1), 1, t.updated_at
			  FROM threads t WHERE t.archived_at IS NULL AND t.kind = 'thread' AND t.title NOT LIKE ?1 ESCAPE '\'
			   AND EXISTS (SELECT 1 FROM items i WHERE i.thread_id = t.id AND i.kind IN ('userMessage', 'agentMessage')
			                AND json_extract(i.payload, '$.text') LIKE ?1 ESCAPE '\')
		) ORDER BY rank, updated DESC, id DESC LIMIT ?2`, pat, limit)
	if err != nil {
		return api.ThreadSearchResult{}, dbErr(err)
	}
	type found struct{ id, field, text string }
	var hits []found
	for rows.Next() {
		var f found
		if err := rows.Scan(&f.id, &f.field, &f.text); err != nil {
			rows.Close()
			return api.ThreadSearchResult{}, dbErr(err)
		}
		hits = append(hits, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return api.ThreadSearchResult{}, dbErr(err)
	}
	out := []SearchHit{}
	for _, f := range hits {
		th, err := getThread(ctx, a.e.q, f.id)
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, SearchHit{Thread: th, Field: f.field, Snippet: snippet(f.text, q)})
	}
	return api.ThreadSearchResult{Hits: out}, nil
}

// snippet is the text around the first case-insensitive match of q, on
// rune boundaries, with newlines as spaces.
func snippet(text, q string) string {
	if text == "" {
		return ""
	}
	lower, lq := strings.ToLower(text), strings.ToLower(q)
	at := strings.Index(lower, lq)
	if at < 0 || len(lower) != len(text) {
		at = 0 // case folding changed the lengths: start from the top
	}
	start, end := max(0, at-snippetRadius), min(len(text), at+len(q)+snippetRadius)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end++
	}
	s := strings.Join(strings.Fields(text[start:end]), " ")
	if start > 0 {
		s = "…" + s
	}
	if end < len(text) {
		s += "…"
	}
	return s
}

func (a *Agentd) workspaceList(ctx context.Context, p api.WorkspaceListParams) (api.WorkspaceListResult, error) {
	limit, err := pageLimit(p.Limit, 20, 200)
	if err != nil {
		return api.WorkspaceListResult{}, err
	}
	rows, err := a.e.q.QueryContext(ctx, `
		SELECT w.path, w.trusted, COUNT(t.id), MAX(t.updated_at)
		  FROM workspaces w LEFT JOIN threads t ON t.workspace = w.path AND t.archived_at IS NULL
		 GROUP BY w.path
		 ORDER BY MAX(t.updated_at) IS NULL, MAX(t.updated_at) DESC, w.path
		 LIMIT ?`, limit)
	if err != nil {
		return api.WorkspaceListResult{}, dbErr(err)
	}
	defer rows.Close()
	out := []WorkspaceInfo{}
	for rows.Next() {
		var w WorkspaceInfo
		var trusted int
		var last *int64
		if err := rows.Scan(&w.Path, &trusted, &w.ThreadCount, &last); err != nil {
			return api.WorkspaceListResult{}, dbErr(err)
		}
		w.Trusted = trusted == 1
		if last != nil {
			w.LastUsedAt = fromMS(*last).Format("2006-01-02T15:04:05.000Z07:00")
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return api.WorkspaceListResult{}, dbErr(err)
	}
	return api.WorkspaceListResult{Workspaces: out}, nil
}
