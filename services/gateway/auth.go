package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/discovery"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/localauth"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/service"
)

// exactOrigin reports whether origin is this service's own origin for the
// Host the request was sent to (already checked to be a loopback name with
// our port). No other origin is trusted: no CORS, no forwarded hosts.
func (g *Gateway) exactOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	return origin != "" && strings.EqualFold(origin, "http://"+r.Host) && len(r.Header.Values("Origin")) == 1
}

// handleExchange turns a single-use ticket into a browser session cookie.
// Only the same-origin page may do it, with a JSON body: a cross-site form
// (text/plain, urlencoded, multipart) is refused.
func (g *Gateway) handleExchange(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !g.exactOrigin(r) {
		rpc.WriteHTTPError(w, errs.New(errs.OriginRejected, "the ticket exchange is only accepted from this service's own page"), 0)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		rpc.WriteHTTPError(w, errs.New(errs.InvalidRequest, "send the ticket as application/json"), http.StatusUnsupportedMediaType)
		return
	}
	if !g.sessions.allowExchange() {
		w.Header().Set("Retry-After", "60")
		rpc.WriteHTTPError(w, errs.New(errs.Overloaded, "too many ticket exchanges; wait a minute"), http.StatusTooManyRequests)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4097))
	if err != nil || len(body) > 4096 {
		rpc.WriteHTTPError(w, errs.New(errs.RequestTooLarge, "the exchange body is limited to 4096 bytes"), 0)
		return
	}
	ticket, err := parseExchange(body)
	if err != nil {
		rpc.WriteHTTPError(w, err, 0)
		return
	}
	if err := g.tickets.Consume(ticket); err != nil {
		rpc.WriteHTTPError(w, err, 0)
		return
	}
	tok, err := g.sessions.create()
	if err != nil {
		rpc.WriteHTTPError(w, err, 0)
		return
	}
	// Host-only (no Domain), HttpOnly, SameSite=Strict. Not Secure: this is
	// loopback HTTP.
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		MaxAge: int(SessionTTL.Seconds()),
	})
	// Never the ticket or the cookie: how many sessions, not which.
	g.svc.Log.Info("browser signed in", "sessions", g.sessions.Count())
	service.WriteJSON(w, http.StatusOK, map[string]any{"instanceId": g.svc.InstanceID(), "expiresIn": int(SessionTTL.Seconds())})
}

// parseExchange reads an exchange body: exactly one JSON object with one
// member, "ticket", a non-empty string, and nothing after it.
func parseExchange(body []byte) (string, error) {
	bad := errs.New(errs.InvalidParams, `the body must be {"ticket": "<ticket>"}`)
	var p struct {
		Ticket string `json:"ticket"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.Ticket == "" {
		return "", bad
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", bad // trailing data, e.g. a second object or a stray '}'
	}
	// A repeated member would silently win over the first: refuse it.
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil || len(members) != 1 || bytes.Count(body, []byte(`"ticket"`)) != 1 {
		return "", bad
	}
	return p.Ticket, nil
}

// handleLogout revokes this browser's session and closes its sockets.
func (g *Gateway) handleLogout(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !g.exactOrigin(r) {
		rpc.WriteHTTPError(w, errs.New(errs.OriginRejected, "logout is only accepted from this service's own page"), 0)
		return
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || !g.sessions.revoke(c.Value) {
		rpc.WriteHTTPError(w, errs.New(errs.Unauthorized, "no session to log out"), 0)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	g.svc.Log.Info("browser logged out", "sessions", g.sessions.Count())
	service.WriteJSON(w, http.StatusOK, map[string]any{"loggedOut": true})
}

// handleSession tells this service's own page whether its session cookie
// is still valid (200) or not (401): a refused WebSocket upgrade looks like
// any network failure to a page, and after a restart (sessions live in
// memory only) the page must ask for a new link instead of retrying.
func (g *Gateway) handleSession(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !g.exactOrigin(r) {
		rpc.WriteHTTPError(w, errs.New(errs.OriginRejected, "the session check is only accepted from this service's own page"), 0)
		return
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || !g.sessions.valid(c.Value) {
		rpc.WriteHTTPError(w, errs.New(errs.Unauthorized, "no browser session: open the link from `deepcode web` again"), 0)
		return
	}
	service.WriteJSON(w, http.StatusOK, map[string]any{"valid": true})
}

// handleTCPBusiness authenticates a business WebSocket on the TCP port:
// a browser (it sends Origin) needs its session cookie and the exact
// service origin, whatever Authorization it sends; a native client (no
// Origin) needs the bearer bound to this instance. Nothing else passes: a
// missing Origin alone is never enough.
func (g *Gateway) handleTCPBusiness(w http.ResponseWriter, r *http.Request) {
	if _, browser := r.Header["Origin"]; browser {
		if !g.exactOrigin(r) {
			rpc.WriteHTTPError(w, errs.New(errs.OriginRejected, "origin %q is not this service", r.Header.Get("Origin")), 0)
			return
		}
		c, err := r.Cookie(SessionCookie)
		if err != nil || !g.sessions.valid(c.Value) {
			rpc.WriteHTTPError(w, errs.New(errs.Unauthorized, "no browser session: open the link from `deepcode web` again"), 0)
			return
		}
		g.business.serveWith(w, r, func(p *rpc.Peer) (func(), bool) {
			if !g.sessions.attach(c.Value, p) {
				return nil, false
			}
			return func() { g.sessions.detach(c.Value, p) }, true
		})
		return
	}
	tok, err := discovery.ReadToken(g.svc.Layout)
	if err != nil {
		rpc.WriteHTTPError(w, errs.New(errs.ServiceUnavailable, "the service credential is not available"), 0)
		return
	}
	if err := localauth.CheckBearer(r, tok, g.svc.InstanceID()); err != nil {
		rpc.WriteHTTPError(w, err, 0)
		return
	}
	g.business.serveWith(w, r, nil)
}
