package apischema_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
)

// docSections maps a heading of docs/PROTOCOL.md (its first word) to the
// service whose methods it describes, or to the link surface, whose one
// section describes both ends.
var docSections = map[string]string{
	"Management": api.ServiceManager,
	"Business":   api.ServiceGateway,
	"agentd":     api.ServiceAgentd,
	"termhost":   api.ServiceTermhost,
	"scheduler":  api.ServiceScheduler,
	"Link":       api.SurfaceLink,
}

// docSection is the section that must describe m.
func docSection(m api.MethodSpec) string {
	if m.Surface == api.SurfaceLink {
		return api.SurfaceLink
	}
	return m.Service
}

var (
	// A method described: "`name {params}` → …", or "`a` / `b {params}`".
	docDefRE = regexp.MustCompile("`([a-z][a-zA-Z]*(?:/[a-zA-Z]+)*)(?: \\{|` / )")
	// A method named: "`a/b`".
	docNameRE = regexp.MustCompile("`([a-z][a-zA-Z]*(?:/[a-zA-Z]+)+)`")
)

// protocolDoc reads docs/PROTOCOL.md and returns, per method name it
// describes, the sections describing it (docSections' values), and every
// slash-separated name it mentions.
func protocolDoc(t *testing.T, text string) (defs map[string][]string, names []string) {
	t.Helper()
	defs = map[string][]string{}
	section := ""
	for line := range strings.SplitSeq(text, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok || strings.HasPrefix(line, "### ") {
			if !ok {
				h = strings.TrimPrefix(line, "### ")
			}
			first, _, _ := strings.Cut(h, " ")
			s, known := docSections[first]
			if ok { // a level-2 heading starts over
				section = ""
			}
			if known {
				section = s
			}
			continue
		}
		for _, m := range docDefRE.FindAllStringSubmatch(line, -1) {
			defs[m[1]] = append(defs[m[1]], section)
		}
		for _, m := range docNameRE.FindAllStringSubmatch(line, -1) {
			names = append(names, m[1])
		}
	}
	return defs, names
}

// TestProtocolDocMethods checks docs/PROTOCOL.md against the contract:
// every method is described (with its params) in its service's section, a
// link method in the link's, and the document describes or names no
// method the contract lacks.
func TestProtocolDocMethods(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	defs, names := protocolDoc(t, string(b))
	for _, m := range api.Contract {
		if !slices.Contains(defs[m.Name], docSection(m)) {
			t.Errorf("docs/PROTOCOL.md does not describe %s (%s, %s surface) in the %s section: add \"`%s {params}` → {result}\" there",
				m.Name, m.Service, m.Surface, docSection(m), m.Name)
		}
	}
	// Slash names in a method namespace (thread/, turn/, …) must be methods.
	namespaces := map[string]bool{}
	for _, m := range api.Contract {
		if ns, _, ok := strings.Cut(m.Name, "/"); ok {
			namespaces[ns] = true
		}
	}
	for name := range defs {
		if _, ok := api.Lookup(name); !ok {
			t.Errorf("docs/PROTOCOL.md describes %s, which the contract (shared/api/contract.go) lacks", name)
		}
	}
	for _, name := range names {
		ns, _, _ := strings.Cut(name, "/")
		if _, ok := api.Lookup(name); !ok && namespaces[ns] {
			t.Errorf("docs/PROTOCOL.md names %s, which the contract (shared/api/contract.go) lacks", name)
		}
	}
}

// TestProtocolDocParser: the checker finds descriptions per section, the
// link's too, so the test above can fail.
func TestProtocolDocParser(t *testing.T) {
	text := "## Management (x)\n- `status {}` → `{phase}`\n" +
		"## Link (y)\n- `service/register {name}` and `thread/bogus`\n" +
		"## Business (z)\n`initialize {protocolVersion}`\n### agentd\n- `turn/start` / `turn/enqueue {threadId}` and `thread/nope`.\n" +
		"## Discovery\n`thread/read {threadId}` see `shared/rpc`\n"
	defs, names := protocolDoc(t, text)
	want := map[string][]string{
		"status":           {api.ServiceManager},
		"service/register": {api.SurfaceLink},
		"initialize":       {api.ServiceGateway},
		"turn/start":       {api.ServiceAgentd},
		"turn/enqueue":     {api.ServiceAgentd},
		"thread/read":      {""},
	}
	if len(defs) != len(want) {
		t.Errorf("defs = %v, want %v", defs, want)
	}
	for k, v := range want {
		if !slices.Equal(defs[k], v) {
			t.Errorf("defs[%s] = %v, want %v", k, defs[k], v)
		}
	}
	if !slices.Equal(names, []string{"thread/bogus", "turn/start", "thread/nope", "shared/rpc"}) {
		t.Errorf("names = %v", names)
	}
}
