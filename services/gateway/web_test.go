package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// buildIDPlaceholder stands for the id while hashing (web/build.mjs).
const buildIDPlaceholder = "0000000000000000"

// computeBuildID is web/build.mjs's buildId: SHA-256 over the files but
// build-id.txt, sorted by path, of "<path>\n<byte length>\n<content>\n"
// with the id replaced by the placeholder; the first 16 hex digits.
func computeBuildID(files map[string]string, id string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		content := strings.ReplaceAll(files[n], id, buildIDPlaceholder)
		h.Write([]byte(strings.ReplaceAll(n, id, buildIDPlaceholder) + "\n" + strconv.Itoa(len(content)) + "\n"))
		h.Write([]byte(content))
		h.Write([]byte("\n"))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// TestEmbeddedWebClient fails when web/dist is missing or stale: the
// committed bundle, its build id and the id compiled into it must agree.
// Rebuild with `make web`.
func TestEmbeddedWebClient(t *testing.T) {
	t.Parallel()
	if FrontendBuildID == "" {
		t.Fatal("web/dist/build-id.txt is missing: run `make web` and commit services/gateway/web/dist")
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(FrontendBuildID) {
		t.Fatalf("build id %q is not 16 hex digits", FrontendBuildID)
	}
	files := map[string]string{}
	err := fs.WalkDir(webFiles, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "build-id.txt" {
			return err
		}
		b, err := fs.ReadFile(webFiles, p)
		files[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	js, css := "assets/app."+FrontendBuildID+".js", "assets/app."+FrontendBuildID+".css"
	for _, name := range []string{"index.html", js, css} {
		if files[name] == "" {
			t.Fatalf("web/dist/%s is missing or empty (files: %v): run `make web`", name, keys(files))
		}
	}
	// Besides the entry files, only esbuild's lazily loaded chunks (the
	// terminal, the highlighter, the diff view).
	chunk := regexp.MustCompile(`^assets/chunk-[A-Z0-9]+\.js$`)
	for name := range files {
		if name != "index.html" && name != js && name != css && !chunk.MatchString(name) {
			t.Errorf("web/dist holds a stray file %s (files: %v): run `make web` (it empties dist/ first)", name, keys(files))
		}
	}
	if got := computeBuildID(files, FrontendBuildID); got != FrontendBuildID {
		t.Fatalf("web/dist/build-id.txt says %s but the bundle hashes to %s: the bundle was changed by hand or not rebuilt; run `make web`", FrontendBuildID, got)
	}
	if !strings.Contains(files[js], `"`+FrontendBuildID+`"`) {
		t.Errorf("the build id is not compiled into %s", js)
	}
	for _, ref := range []string{`src="/assets/app.` + FrontendBuildID + `.js"`, `href="/assets/app.` + FrontendBuildID + `.css"`} {
		if !strings.Contains(files["index.html"], ref) {
			t.Errorf("index.html does not reference %s", ref)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestComputeBuildIDIsContentAddressed(t *testing.T) {
	t.Parallel()
	a := computeBuildID(map[string]string{"index.html": "x", "assets/app.js": "y"}, buildIDPlaceholder)
	b := computeBuildID(map[string]string{"index.html": "x", "assets/app.js": "z"}, buildIDPlaceholder)
	if a == b {
		t.Fatal("different content, same id")
	}
	// The id itself does not change the hash: it stands for the placeholder.
	id := "0123456789abcdef"
	c := computeBuildID(map[string]string{"index.html": "x" + id, "assets/app." + id + ".js": "y"}, id)
	d := computeBuildID(map[string]string{"index.html": "x" + buildIDPlaceholder, "assets/app." + buildIDPlaceholder + ".js": "y"}, buildIDPlaceholder)
	if c != d {
		t.Fatalf("%s != %s", c, d)
	}
}
