package apischema_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/deepcode-dev/deepcode/docs"
	"github.com/deepcode-dev/deepcode/shared/api/apischema"
)

var update = flag.Bool("update", false, "rewrite the generated files (docs/"+apischema.FileName+", "+apischema.TypeScriptFile+")")

// committed is where the generated schema is committed.
var committed = filepath.Join("..", "..", "..", "docs", apischema.FileName)

// TestSchemaFresh fails when docs/protocol.schema.json is not what the
// contract's Go types generate. Regenerate (with the TypeScript types) with
// go test ./shared/api/apischema -run Fresh -update.
func TestSchemaFresh(t *testing.T) {
	doc, err := apischema.Generate()
	if err != nil {
		t.Fatal(err)
	}
	want, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(committed, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/%s is stale: run go test ./shared/api/apischema -run Fresh -update and commit it", apischema.FileName)
	}
	if !bytes.Equal(docs.ProtocolSchema, want) {
		t.Fatalf("the embedded schema differs from docs/%s: rebuild", apischema.FileName)
	}
}

// TestTypeScriptFresh fails when the web client's generated wire types
// (services/gateway/web/src/protocol.gen.ts) are not what the contract
// generates. Regenerate with go test ./shared/api/apischema -run Fresh -update.
func TestTypeScriptFresh(t *testing.T) {
	doc, err := apischema.Generate()
	if err != nil {
		t.Fatal(err)
	}
	want, err := doc.TypeScript()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "..", filepath.FromSlash(apischema.TypeScriptFile))
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go test ./shared/api/apischema -run Fresh -update and commit it", apischema.TypeScriptFile)
	}
}
