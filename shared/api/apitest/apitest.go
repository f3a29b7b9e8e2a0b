// Package apitest checks a service's served methods against the contract
// (shared/api): the registry tests of each service call CheckServed.
package apitest

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// Untyped are the methods whose handlers read the request itself (the
// handshake subscribes the connection): their types are the contract's but
// cannot be read from the handler.
var Untyped = []string{api.MethodInitialize}

// CheckServed compares the methods mux serves for service with the
// contract: every served method must be in the contract under that
// service, every contract method of the service must be served, and each
// handler's params and result types must be the contract's.
func CheckServed(service string, mux *rpc.Mux) []error {
	var problems []error
	served := mux.Methods()
	for _, name := range served {
		spec, ok := api.Lookup(name)
		if !ok {
			problems = append(problems, fmt.Errorf("%s serves %q, which the contract (shared/api/contract.go) does not list", service, name))
			continue
		}
		if !spec.Serves(service) {
			problems = append(problems, fmt.Errorf("%s serves %q, which the contract gives to %s", service, name, spec.Service))
			continue
		}
		typed, ok := mux.Handler(name).(rpc.Typed)
		if !ok {
			if !slices.Contains(Untyped, name) {
				problems = append(problems, fmt.Errorf("%s: the handler of %q is not typed: register it with rpc.Method and the contract's types", service, name))
			}
			continue
		}
		p, r := typed.WireTypes()
		if p != spec.ParamsType() {
			problems = append(problems, fmt.Errorf("%s: %q takes %v; the contract says %v", service, name, p, spec.ParamsType()))
		}
		if r != spec.ResultType() && !(r.Kind() == reflect.Pointer && r.Elem() == spec.ResultType()) {
			problems = append(problems, fmt.Errorf("%s: %q returns %v; the contract says %v", service, name, r, spec.ResultType()))
		}
	}
	for _, name := range api.ServedBy(service) {
		if !slices.Contains(served, name) {
			problems = append(problems, fmt.Errorf("the contract lists %q for %s, which does not serve it", name, service))
		}
	}
	return problems
}
