package agentd_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/services/agentd"
	"github.com/deepcode-dev/deepcode/services/agentd/runtime/script"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// TestThreadListMethods covers thread/rename, thread/archive,
// thread/search, workspace/list and profile/list, through the gateway as a
// client calls them: good input, malformed and oversized input, unknown
// ids, and a browser without a session.
func TestThreadListMethods(t *testing.T) {
	t.Parallel()
	env := startConfigured(t)
	c := dialGateway(t, env)
	ws := t.TempDir()
	a := c.newThreadIn(ws, "script")
	b := c.newThreadIn(ws, "script")
	other := c.newThread("script2")
	turn := c.start(b.ID, "say the quick brown fox jumps\nwrite notes.md hello")
	c.waitEnded(b.ID, turn.ID)

	t.Run("rename", func(t *testing.T) {
		var r struct{ Thread agentd.Thread }
		c.must("thread/rename", map[string]any{"threadId": a.ID, "title": "  Release notes  "}, &r)
		if r.Thread.ID != a.ID || r.Thread.Title != "Release notes" {
			t.Fatalf("thread/rename: %+v", r.Thread)
		}
		if got := c.readThread(a.ID).Thread.Title; got != "Release notes" {
			t.Fatalf("thread/read after rename: title %q", got)
		}
		if !r.Thread.UpdatedAt.Equal(a.UpdatedAt) {
			t.Errorf("a rename moved the thread in the list: updatedAt %v → %v", a.UpdatedAt, r.Thread.UpdatedAt)
		}
		c.fail("thread/rename", map[string]any{"threadId": a.ID, "title": strings.Repeat("x", 257)}, errs.InvalidParams)
		c.fail("thread/rename", map[string]any{"threadId": a.ID, "title": "two\nlines"}, errs.InvalidParams)
		c.fail("thread/rename", map[string]any{"threadId": a.ID, "title": 7}, errs.InvalidParams)
		c.fail("thread/rename", map[string]any{"threadId": "thr_AAAAAAAAAAAAAAAA", "title": "x"}, errs.NotFound)
		c.fail("thread/rename", map[string]any{"threadId": "../etc", "title": "x"}, errs.NotFound)
		c.fail("thread/rename", map[string]any{"title": "x"}, errs.NotFound)
	})

	t.Run("search", func(t *testing.T) {
		var r struct{ Hits []agentd.SearchHit }
		c.must("thread/search", map[string]any{"query": "release"}, &r)
		if len(r.Hits) != 1 || r.Hits[0].Thread.ID != a.ID || r.Hits[0].Field != "title" {
			t.Fatalf("search by title: %+v", r.Hits)
		}
		c.must("thread/search", map[string]any{"query": "BROWN fox"}, &r)
		if len(r.Hits) != 1 || r.Hits[0].Thread.ID != b.ID || r.Hits[0].Field != "text" || !strings.Contains(r.Hits[0].Snippet, "brown fox") {
			t.Fatalf("search by text: %+v", r.Hits)
		}
		// LIKE's wildcards are literal characters in a query.
		c.must("thread/search", map[string]any{"query": "%"}, &r)
		if len(r.Hits) != 0 {
			t.Fatalf("search for %%: %+v", r.Hits)
		}
		c.fail("thread/search", map[string]any{"query": ""}, errs.InvalidParams)
		c.fail("thread/search", map[string]any{"query": "   "}, errs.InvalidParams)
		c.fail("thread/search", map[string]any{"query": strings.Repeat("q", 257)}, errs.InvalidParams)
		c.fail("thread/search", map[string]any{"query": "x", "limit": 101}, errs.InvalidParams)
		c.fail("thread/search", map[string]any{"query": []int{1}}, errs.InvalidParams)
	})

	t.Run("archive", func(t *testing.T) {
		var r struct{ Thread agentd.Thread }
		c.must("thread/archive", map[string]any{"threadId": a.ID}, &r)
		if !r.Thread.Archived {
			t.Fatalf("thread/archive: %+v", r.Thread)
		}
		if listed(t, c, false)[a.ID] || !listed(t, c, true)[a.ID] || !listed(t, c, false)[b.ID] {
			t.Fatal("an archived thread is still in thread/list, or missing from the archived list")
		}
		var s struct{ Hits []agentd.SearchHit }
		c.must("thread/search", map[string]any{"query": "release"}, &s)
		if len(s.Hits) != 0 {
			t.Fatalf("search finds an archived thread: %+v", s.Hits)
		}
		c.must("thread/archive", map[string]any{"threadId": a.ID}, &r) // again: nothing changes
		var back struct{ Thread agentd.Thread }
		c.must("thread/archive", map[string]any{"threadId": a.ID, "archived": false}, &back)
		if back.Thread.Archived || !listed(t, c, false)[a.ID] {
			t.Fatal("thread/archive archived:false did not bring the thread back")
		}
		c.fail("thread/archive", map[string]any{"threadId": "thr_AAAAAAAAAAAAAAAA"}, errs.NotFound)
		c.fail("thread/archive", map[string]any{"threadId": a.ID, "archived": "yes"}, errs.InvalidParams)
	})

	t.Run("workspace/list", func(t *testing.T) {
		var r struct{ Workspaces []agentd.WorkspaceInfo }
		c.must("workspace/list", map[string]any{}, &r)
		real, _ := filepath.EvalSymlinks(ws)
		otherWS := c.readThread(other.ID).Thread.Workspace
		if len(r.Workspaces) < 2 || r.Workspaces[0].Path != real || r.Workspaces[1].Path != otherWS {
			t.Fatalf("workspace/list is not most recent first (%s, then %s): %+v", real, otherWS, r.Workspaces)
		}
		if w := r.Workspaces[0]; !w.Trusted || w.ThreadCount != 2 || w.LastUsedAt == "" {
			t.Fatalf("workspace/list entry: %+v", w)
		}
		c.must("workspace/list", map[string]any{"limit": 1}, &r)
		if len(r.Workspaces) != 1 {
			t.Fatalf("limit 1: %+v", r.Workspaces)
		}
		c.fail("workspace/list", map[string]any{"limit": 201}, errs.InvalidParams)
		c.fail("workspace/list", map[string]any{"limit": -1}, errs.InvalidParams)
		c.fail("workspace/list", []int{1}, errs.InvalidParams)
	})

	t.Run("profile/list", func(t *testing.T) {
		var r struct{ Profiles []agentd.ProfileInfo }
		c.must("profile/list", map[string]any{}, &r)
		byName := map[string]agentd.ProfileInfo{}
		for _, p := range r.Profiles {
			byName[p.Name] = p
		}
		if byName["script"].Provider != "script" || byName["cat"].Provider != "exec" || !byName["shell"].Default {
			t.Fatalf("profile/list: %+v", r.Profiles)
		}
		raw, _ := json.Marshal(r.Profiles)
		if strings.Contains(string(raw), "/bin/cat") {
			t.Fatalf("profile/list shows a profile's command: %s", raw)
		}
	})

	t.Run("file change carries its diff", func(t *testing.T) {
		items := c.readTurn(b.ID, turn.ID).Items
		fc := itemsOf(items, "fileChange")
		if len(fc) != 1 {
			t.Fatalf("file changes: %+v", items)
		}
		var p script.FilePayload
		decode(t, fc[0].Payload, &p)
		if p.Before != nil || p.After == nil || *p.After != "hello" || p.Truncated {
			t.Fatalf("a new file's change: %+v", p)
		}
		big := strings.Repeat("y", 70<<10)
		if err := os.WriteFile(filepath.Join(ws, "big.txt"), []byte(big), 0o600); err != nil {
			t.Fatal(err)
		}
		t2 := c.start(b.ID, "append notes.md world\nwrite big.txt small")
		c.waitEnded(b.ID, t2.ID)
		fc = itemsOf(c.readTurn(b.ID, t2.ID).Items, "fileChange")
		var ap, bg script.FilePayload
		decode(t, fc[0].Payload, &ap)
		decode(t, fc[1].Payload, &bg)
		if ap.Before == nil || *ap.Before != "hello" || ap.After == nil || *ap.After != "helloworld\n" {
			t.Fatalf("an append's change: %+v", ap)
		}
		if !bg.Truncated || bg.Before != nil || bg.After != nil {
			t.Fatalf("a change of a 70 KiB file carries its text: truncated %v", bg.Truncated)
		}
	})

	t.Run("unauthorised", func(t *testing.T) {
		// A browser without the session cookie never reaches the methods.
		var l struct{ URL string }
		env.MustRun("web", "--no-open", "--json").JSON(t, &l)
		origin := l.URL[:strings.Index(l.URL, "/#")]
		req, _ := http.NewRequest(http.MethodGet, origin+"/api/rpc", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		req.Header.Set("Origin", origin)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
			t.Fatalf("a WebSocket without the session cookie: HTTP %d", res.StatusCode)
		}
	})
}

func listed(t *testing.T, c *conn, archived bool) map[string]bool {
	t.Helper()
	var r struct{ Threads []agentd.Thread }
	c.must("thread/list", map[string]any{"limit": 200, "archived": archived}, &r)
	out := map[string]bool{}
	for _, th := range r.Threads {
		out[th.ID] = true
	}
	return out
}
