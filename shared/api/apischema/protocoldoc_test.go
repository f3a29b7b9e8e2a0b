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
// service whose methods it describes; "" is a section that describes
// methods the contract does not hold (the services' internal link).
var docSections = map[string]string{
	"Management": api.ServiceManager,
	"Business":   api.ServiceGateway,
	"agentd":     api.ServiceAgentd,
	"termhost":   api.ServiceTermhost,
	"scheduler":  api.ServiceScheduler,
	"Internal":   "",
}

var (
	// A method described: "`name {params}` → …", or "`a` / `b {params}`".
	docDefRE = regexp.MustCompile("`([a-z][a-zA-Z]*(?:/[a-zA-Z]+)*)(?: \\{|` / )")
	// A method named: "`a/b`".
	docNameRE = regexp.MustCompile("`([a-z][a-zA-Z]*(?:/[a-zA-Z]+)+)`")
)

// protocolDoc reads docs/PROTOCOL.md and returns, per method name it
// describes, the services of the sections describing it, and every
// slash-separated name it mentions outside the internal section.
func protocolDoc(t *testing.T, text string) (defs map[string][]string, names []string) {
	t.Helper()
	defs = map[string][]string{}
	service, internal := "", false
	for line := range strings.SplitSeq(text, "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok || strings.HasPrefix(line, "### ") {
			if !ok {
				h = strings.TrimPrefix(line, "### ")
			}
			first, _, _ := strings.Cut(h, " ")
			s, known := docSections[first]
			if ok { // a level-2 heading starts over
				service, internal = "", false
			}
			if known {
				service, internal = s, s == ""
			}
			continue
		}
		if internal {
			continue
		}
		for _, m := range docDefRE.FindAllStringSubmatch(line, -1) {
			defs[m[1]] = append(defs[m[1]], service)
		}
		for _, m := range docNameRE.FindAllStringSubmatch(line, -1) {
			names = append(names, m[1])
		}
	}
	return defs, names
}

// TestProtocolDocMethods checks docs/PROTOCOL.md against the contract:
// every method of the business, control and local surfaces is described
// (with its params) in its service's section, and the document describes
// or names no method the contract lacks (the services' internal link
// aside).
func TestProtocolDocMethods(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "PROTOCOL.md"))
	if err != nil {
		t.Fatal(err)
	}
	defs, names := protocolDoc(t, string(b))
	for _, m := range api.Contract {
		if !slices.Contains(defs[m.Name], m.Service) {
			t.Errorf("docs/PROTOCOL.md does not describe %s (%s, %s surface) in the %s section: add \"`%s {params}` → {result}\" there",
				m.Name, m.Service, m.Surface, m.Service, m.Name)
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

// TestProtocolDocParser: the checker finds descriptions per section and
// ignores the internal link, so the test above can fail.
func TestProtocolDocParser(t *testing.T) {
	text := "## Management (x)\n- `status {}` → `{phase}`\n" +
		"## Internal (y)\n- `service/register {name}` and `thread/bogus`\n" +
		"## Business (z)\n`initialize {protocolVersion}`\n### agentd\n- `turn/start` / `turn/enqueue {threadId}` and `thread/nope`.\n" +
		"## Discovery\n`thread/read {threadId}` see `shared/rpc`\n"
	defs, names := protocolDoc(t, text)
	want := map[string][]string{
		"status":       {api.ServiceManager},
		"initialize":   {api.ServiceGateway},
		"turn/start":   {api.ServiceAgentd},
		"turn/enqueue": {api.ServiceAgentd},
		"thread/read":  {""},
	}
	if len(defs) != len(want) {
		t.Errorf("defs = %v, want %v", defs, want)
	}
	for k, v := range want {
		if !slices.Equal(defs[k], v) {
			t.Errorf("defs[%s] = %v, want %v", k, defs[k], v)
		}
	}
	if !slices.Equal(names, []string{"turn/start", "thread/nope", "shared/rpc"}) {
		t.Errorf("names = %v", names)
	}
}
