package apitest

import (
	"context"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// TestCheckServedReportsDrift: a method the contract lacks, a contract
// method not served, a handler with other types and an untyped handler are
// each reported.
func TestCheckServedReportsDrift(t *testing.T) {
	mux := rpc.NewMux()
	mux.Handle("thread/unknown", rpc.Method(func(context.Context, api.Empty) (api.Empty, error) { return api.Empty{}, nil }))
	mux.Handle(api.MethodThreadRead, rpc.Method(func(context.Context, api.ThreadRef) (map[string]any, error) { return nil, nil }))
	mux.HandleFunc(api.MethodThreadList, func(context.Context, *rpc.Request) (any, error) { return nil, nil })
	mux.Handle(api.MethodTerminalRead, rpc.Method(func(context.Context, api.TerminalReadParams) (api.TerminalReadResult, error) {
		return api.TerminalReadResult{}, nil
	}))
	var got []string
	for _, err := range CheckServed(api.ServiceAgentd, mux) {
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`serves "thread/unknown", which the contract`,
		`"thread/read" returns map[string]interface {}`,
		`the handler of "thread/list" is not typed`,
		`"terminal/read", which the contract gives to termhost`,
		`the contract lists "turn/start" for agentd, which does not serve it`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
}
