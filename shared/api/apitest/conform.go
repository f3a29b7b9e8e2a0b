package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/deepcode-dev/deepcode/docs"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Conformance validates what a service sends against the committed JSON
// Schema (docs/protocol.schema.json, kept equal to the contract by
// apischema's tests): every definition forbids members it does not
// declare, so a handler that returns a field the contract lacks fails the
// test that received it.
type Conformance struct {
	doc struct {
		ID            string `json:"$id"`
		Methods       map[string]struct{ Result string }
		Notifications map[string]struct{ Params string }
	}
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema // by definition pointer
}

var (
	conformOnce sync.Once
	conform     *Conformance
	conformErr  error
)

// Conform returns the process's validator (compiled once).
func Conform() (*Conformance, error) {
	conformOnce.Do(func() { conform, conformErr = newConformance(docs.ProtocolSchema) })
	return conform, conformErr
}

func newConformance(schema []byte) (*Conformance, error) {
	c := &Conformance{compiler: jsonschema.NewCompiler(), schemas: map[string]*jsonschema.Schema{}}
	if err := json.Unmarshal(schema, &c.doc); err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c.compiler.AssertFormat()
	if err := c.compiler.AddResource(c.doc.ID, doc); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Conformance) schema(ref string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.schemas[ref]; ok {
		return s, nil
	}
	s, err := c.compiler.Compile(c.doc.ID + ref)
	if err != nil {
		return nil, err
	}
	c.schemas[ref] = s
	return s, nil
}

func (c *Conformance) validate(what, ref string, raw []byte) error {
	s, err := c.schema(ref)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", what, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s does not match the contract (%s): %v\n%s", what, ref, err, truncate(raw))
	}
	return nil
}

// Result checks a method's result.
func (c *Conformance) Result(method string, raw []byte) error {
	m, ok := c.doc.Methods[method]
	if !ok {
		return fmt.Errorf("a result of %q, which the contract does not list", method)
	}
	return c.validate("the result of "+method, m.Result, raw)
}

// Notification checks a notification's params.
func (c *Conformance) Notification(method string, raw []byte) error {
	n, ok := c.doc.Notifications[method]
	if !ok {
		return fmt.Errorf("a notification %q, which the contract does not list", method)
	}
	return c.validate("the params of "+method, n.Params, raw)
}

// Error checks that a method's error code is one the contract lists for
// it (or a common one).
func (c *Conformance) Error(method string, code errs.Code) error {
	m, ok := api.Lookup(method)
	if !ok {
		return nil // the method is unknown: METHOD_NOT_FOUND, checked by the caller
	}
	if slices.Contains(api.CommonErrors, code) || slices.Contains(m.Errors, code) {
		return nil
	}
	return fmt.Errorf("%s returned %s, which the contract does not list for it", method, code)
}

func truncate(b []byte) string {
	s := string(b)
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return strings.TrimSpace(s)
}
