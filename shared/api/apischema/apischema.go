// Package apischema generates the JSON Schema (draft 2020-12) of the
// protocol from the contract's Go types (shared/api) with
// github.com/invopop/jsonschema: one document whose $defs hold every wire
// type and whose "methods" and "notifications" name, per method, the
// definitions of its params and result, its errors, drain safety and retry
// policy.
package apischema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/buildinfo"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// FileName is the generated document's name (in docs/).
const FileName = "protocol.schema.json"

// ID is the document's $id.
const ID = "https://deepcode.dev/schema/" + FileName

// Method is one method in the document.
type Method struct {
	Service   string      `json:"service"`
	Surface   string      `json:"surface"`
	Params    string      `json:"params"`
	Result    string      `json:"result"`
	Errors    []errs.Code `json:"errors"`
	DrainSafe bool        `json:"drainSafe"`
	Retry     string      `json:"retry"`
	Summary   string      `json:"summary"`
}

// Notification is one notification in the document.
type Notification struct {
	Service     string `json:"service"`
	Surface     string `json:"surface"`
	LinkHandler string `json:"linkHandler,omitempty"`
	Params      string `json:"params"`
	Summary     string `json:"summary"`
}

// Document is the generated schema.
type Document struct {
	Schema          string                        `json:"$schema"`
	ID              string                        `json:"$id"`
	Title           string                        `json:"title"`
	ProtocolVersion string                        `json:"protocolVersion"`
	CommonErrors    []errs.Code                   `json:"commonErrors"`
	Methods         map[string]Method             `json:"methods"`
	Notifications   map[string]Notification       `json:"notifications"`
	Defs            map[string]*jsonschema.Schema `json:"$defs"`
}

// Ref is the JSON pointer (within the document) of a type's definition.
func Ref(name string) string { return "#/$defs/" + name }

// TypeName is the definition name of a wire type: the contract's own
// types keep their names, others are prefixed by their package
// (mgmt.Status is MgmtStatus).
func TypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() == "" {
		if t.Kind() == reflect.Struct && t.NumField() == 0 {
			return "Empty"
		}
		return ""
	}
	pkg := t.PkgPath()
	if pkg == reflect.TypeFor[api.Empty]().PkgPath() || pkg == reflect.TypeFor[api.Thread]().PkgPath() {
		return t.Name()
	}
	base := pkg[strings.LastIndexByte(pkg, '/')+1:]
	return strings.ToUpper(base[:1]) + base[1:] + t.Name()
}

func reflector() *jsonschema.Reflector {
	return &jsonschema.Reflector{
		Anonymous: true,
		Namer:     TypeName,
		Mapper: func(t reflect.Type) *jsonschema.Schema {
			if t == reflect.TypeFor[api.Empty]() {
				// An anonymous struct{} would be inlined; Empty is one
				// definition.
				return &jsonschema.Schema{Ref: Ref("Empty")}
			}
			return nil
		},
	}
}

// Generate builds the document from the contract.
func Generate() (*Document, error) {
	doc := &Document{
		Schema:          jsonschema.Version,
		ID:              ID,
		Title:           "deepcode protocol " + buildinfo.ProtocolVersion,
		ProtocolVersion: buildinfo.ProtocolVersion,
		CommonErrors:    api.CommonErrors,
		Methods:         map[string]Method{},
		Notifications:   map[string]Notification{},
		Defs: map[string]*jsonschema.Schema{
			"Empty": {Type: "object", AdditionalProperties: jsonschema.FalseSchema},
		},
	}
	r := reflector()
	seen := map[reflect.Type]bool{}
	add := func(t reflect.Type) (string, error) {
		name := TypeName(t)
		if name == "" {
			return "", fmt.Errorf("the wire type %v has no name: declare it in shared/api", t)
		}
		if name == "Empty" {
			return name, nil
		}
		s := r.ReflectFromType(t)
		for k, d := range s.Definitions {
			doc.Defs[k] = d
		}
		collect(t, seen)
		return name, nil
	}
	for _, m := range api.Contract {
		p, err := add(m.ParamsType())
		if err != nil {
			return nil, err
		}
		res, err := add(m.ResultType())
		if err != nil {
			return nil, err
		}
		doc.Methods[m.Name] = Method{Service: m.Service, Surface: m.Surface, Params: Ref(p), Result: Ref(res),
			Errors: slices.Clone(m.Errors), DrainSafe: m.DrainSafe, Retry: m.Retry, Summary: m.Summary}
		if doc.Methods[m.Name].Errors == nil {
			mm := doc.Methods[m.Name]
			mm.Errors = []errs.Code{}
			doc.Methods[m.Name] = mm
		}
	}
	for _, n := range api.Notifications {
		p, err := add(reflect.TypeOf(n.Params))
		if err != nil {
			return nil, err
		}
		doc.Notifications[n.Name] = Notification{Service: n.Service, Surface: n.Surface, LinkHandler: n.LinkHandler, Params: Ref(p), Summary: n.Summary}
	}
	for _, t := range api.PayloadTypes {
		if _, err := add(t); err != nil {
			return nil, err
		}
	}
	if err := addEnums(doc.Defs); err != nil {
		return nil, err
	}
	for t := range seen {
		allowNull(doc.Defs[TypeName(t)], t)
	}
	return doc, nil
}

// collect records the struct types reachable from t.
func collect(t reflect.Type, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
		if t == reflect.TypeFor[json.RawMessage]() || t == reflect.TypeFor[[]byte]() {
			return
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.Name() == "" || seen[t] || t.PkgPath() == "time" {
		return
	}
	seen[t] = true
	for f := range fields(t) {
		collect(f.Type, seen)
	}
}

// fields are t's members on the wire (embedded structs flattened).
func fields(t reflect.Type) func(yield func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				for g := range fields(f.Type) {
					if !yield(g) {
						return
					}
				}
				continue
			}
			if f.IsExported() && f.Tag.Get("json") != "-" && !yield(f) {
				return
			}
		}
	}
}

// allowNull lets a member that encoding/json may write as null (a nil
// pointer, slice or map without omitempty) be null: the generator
// describes only the non-null value.
func allowNull(def *jsonschema.Schema, t reflect.Type) {
	if def == nil || def.Properties == nil {
		return
	}
	for f := range fields(t) {
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if strings.Contains(opts, "omitempty") || f.Type == reflect.TypeFor[json.RawMessage]() {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		default:
			continue
		}
		prop, ok := def.Properties.Get(name)
		if !ok || prop == nil {
			continue
		}
		def.Properties.Set(name, &jsonschema.Schema{AnyOf: []*jsonschema.Schema{prop, {Type: "null"}}})
	}
}

// Marshal encodes the document as committed: indented, with a final
// newline.
func (d *Document) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
