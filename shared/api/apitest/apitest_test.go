package apitest

import (
	"context"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
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

// TestCheckLinkReportsDrift: on the link, a method the contract lacks, a
// business method, a method of the other end, a notification of another
// side, a missing method and a notification with other params are each
// reported; CheckServed refuses a link method on a service's own socket.
func TestCheckLinkReportsDrift(t *testing.T) {
	mux := rpc.NewMux()
	mux.Handle("service/unknown", rpc.Method(func(context.Context, api.Empty) (api.Empty, error) { return api.Empty{}, nil }))
	mux.Handle(api.MethodThreadRead, rpc.Method(func(context.Context, api.ThreadRef) (api.ThreadReadResult, error) {
		return api.ThreadReadResult{}, nil
	}))
	mux.Handle(mgmt.MethodServiceRegister, rpc.Method(func(context.Context, mgmt.RegisterParams) (mgmt.RegisterResult, error) {
		return mgmt.RegisterResult{}, nil
	}))
	mux.Handle(mgmt.NotifyServiceActivity, rpc.Method(func(context.Context, mgmt.ActivityParams) (api.Empty, error) { return api.Empty{}, nil }))
	mux.Handle(mgmt.MethodServiceDrain, rpc.Method(func(context.Context, api.Empty) (mgmt.ActivityParams, error) {
		return mgmt.ActivityParams{}, nil
	}))
	mux.Handle(mgmt.MethodServiceResume, rpc.Method(func(context.Context, api.Empty) (api.Empty, error) { return api.Empty{}, nil }))
	var got []string
	for _, err := range CheckLink(api.ServiceEvery, mux) {
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		`serves "service/unknown" on the link, which the contract`,
		`serves "thread/read" on the link, which the contract gives to agentd on the business surface`,
		`serves "service/register" on the link, which the contract gives to manager`,
		`handles the notification "service.activity" on the link, which the contract gives to "manager"`,
		`"service/resume" returns struct {}`,
		`the contract lists "service/cancel" for every on the link`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
	if strings.Contains(all, `"service/drain"`) {
		t.Errorf("service/drain matches the contract, yet:\n%s", all)
	}

	gw := rpc.NewMux()
	gw.Handle(api.NotifyServicePhase, rpc.Method(func(context.Context, api.Empty) (api.Empty, error) { return api.Empty{}, nil }))
	got = got[:0]
	for _, err := range CheckLink(api.ServiceGateway, gw) {
		got = append(got, err.Error())
	}
	all = strings.Join(got, "\n")
	for _, want := range []string{
		`"service.phase" takes struct {}; the contract says api.ServicePhaseParams`,
		`the contract lists "gateway/issueTicket" for gateway on the link`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}

	own := rpc.NewMux()
	own.Handle(mgmt.MethodServiceDrain, rpc.Method(func(context.Context, api.Empty) (mgmt.ActivityParams, error) {
		return mgmt.ActivityParams{}, nil
	}))
	if errs := CheckServed(api.ServiceAgentd, own); len(errs) == 0 || !strings.Contains(errs[0].Error(), "link method") {
		t.Errorf("CheckServed of a link method on agentd's socket: %v", errs)
	}
}
