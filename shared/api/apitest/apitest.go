// Package apitest checks a service's served methods against the contract
// (shared/api): the registry tests of each service call CheckServed, and
// those of both ends of the manager's link CheckLink.
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
		if spec.Surface == api.SurfaceLink {
			problems = append(problems, fmt.Errorf("%s serves the link method %q on its own socket: it belongs on the link (CheckLink)", service, name))
			continue
		}
		if !spec.Serves(service) {
			problems = append(problems, fmt.Errorf("%s serves %q, which the contract gives to %s", service, name, spec.Service))
			continue
		}
		problems = append(problems, checkTypes(service, mux, name, spec.ParamsType(), spec.ResultType())...)
	}
	for _, name := range api.ServedBy(service) {
		if !slices.Contains(served, name) {
			problems = append(problems, fmt.Errorf("the contract lists %q for %s, which does not serve it", name, service))
		}
	}
	return problems
}

// CheckLink compares the methods and notifications mux handles on side's
// end of the link (the manager's, a service's LinkRPC, or ServiceEvery's
// for shared/service's own) with the contract's link surface, as
// CheckServed does for a service's sockets.
func CheckLink(side string, mux *rpc.Mux) []error {
	var problems []error
	served := mux.Methods()
	for _, name := range served {
		if n, ok := api.LookupNotification(name); ok {
			if n.LinkHandler != side {
				problems = append(problems, fmt.Errorf("%s handles the notification %q on the link, which the contract gives to %q", side, name, n.LinkHandler))
				continue
			}
			problems = append(problems, checkTypes(side, mux, name, reflect.TypeOf(n.Params), nil)...)
			continue
		}
		spec, ok := api.Lookup(name)
		if !ok {
			problems = append(problems, fmt.Errorf("%s serves %q on the link, which the contract (shared/api/contract.go) does not list", side, name))
			continue
		}
		if spec.Surface != api.SurfaceLink || spec.Service != side {
			problems = append(problems, fmt.Errorf("%s serves %q on the link, which the contract gives to %s on the %s surface", side, name, spec.Service, spec.Surface))
			continue
		}
		problems = append(problems, checkTypes(side, mux, name, spec.ParamsType(), spec.ResultType())...)
	}
	for _, name := range api.LinkServedBy(side) {
		if !slices.Contains(served, name) {
			problems = append(problems, fmt.Errorf("the contract lists %q for %s on the link, which does not serve it", name, side))
		}
	}
	return problems
}

// checkTypes compares a handler's types with the contract's; a nil result
// is not checked (a notification's result is discarded).
func checkTypes(service string, mux *rpc.Mux, name string, params, result reflect.Type) []error {
	typed, ok := mux.Handler(name).(rpc.Typed)
	if !ok {
		if slices.Contains(Untyped, name) {
			return nil
		}
		return []error{fmt.Errorf("%s: the handler of %q is not typed: register it with rpc.Method and the contract's types", service, name)}
	}
	var problems []error
	p, r := typed.WireTypes()
	if p != params {
		problems = append(problems, fmt.Errorf("%s: %q takes %v; the contract says %v", service, name, p, params))
	}
	if result != nil && r != result && !(r.Kind() == reflect.Pointer && r.Elem() == result) {
		problems = append(problems, fmt.Errorf("%s: %q returns %v; the contract says %v", service, name, r, result))
	}
	return problems
}
