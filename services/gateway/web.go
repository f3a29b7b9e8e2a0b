package gateway

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/go-chi/chi/v5"
)

// The packaged web client, built by `make web` (services/gateway/web) and
// committed, so that a plain `go build` needs no Node.js.
//
//go:embed web/dist
var webDist embed.FS

// webFiles is web/dist: index.html, build-id.txt and assets/ (file names
// carry the build id, so they never change and are cached for good).
var webFiles, _ = fs.Sub(webDist, "web/dist")

// FrontendBuildID is the build id of the embedded web client (the first 16
// hex digits of the bundle's SHA-256), sent in initialize's serviceInfo so
// the page can check it against the id compiled into it.
var FrontendBuildID = readBuildID()

func readBuildID() string {
	b, err := fs.ReadFile(webFiles, "build-id.txt")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// webRoutes serves the page and its assets on the TCP port (the router has
// already checked Host). Nothing here is secret: the page authenticates
// with the ticket in its fragment, which the browser never sends.
func (g *Gateway) webRoutes(r chi.Router) {
	r.Get("/", handleIndex)
	r.Get("/assets/{name}", handleAsset)
}

// contentSecurityPolicy allows only this origin's own scripts, styles and
// WebSocket, and no framing.
func contentSecurityPolicy(host string) string {
	return "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self' ws://" + host + "; base-uri 'none'; form-action 'none'; object-src 'none'; frame-ancestors 'none'"
}

func securityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func handleIndex(w http.ResponseWriter, r *http.Request) {
	page, err := fs.ReadFile(webFiles, "index.html")
	if err != nil {
		rpc.WriteHTTPError(w, errs.New(errs.NotFound, "this build has no web client: run `make web`"), 0)
		return
	}
	h := w.Header()
	securityHeaders(h)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", contentSecurityPolicy(r.Host))
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(page)))
	_, _ = w.Write(page)
}

var assetTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
}

func handleAsset(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	typ, known := assetTypes[path.Ext(name)]
	body, err := fs.ReadFile(webFiles, "assets/"+name) // one flat folder: fs paths never climb out
	if !known || strings.Contains(name, "/") || err != nil {
		rpc.WriteHTTPError(w, errs.New(errs.NotFound, "no asset %q", name), 0)
		return
	}
	h := w.Header()
	securityHeaders(h)
	// The name carries the build id: the content never changes.
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("Content-Type", typ)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
