package api

import (
	"reflect"
	"slices"

	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/mgmt"
)

// The contract: every method and notification of every service, with its
// params and result types, the error codes it may return beyond the common
// ones, whether it is served while the service drains, and its retry
// policy. Handlers are registered with these types (a registry test in each
// service checks its mux against Contract), the JSON Schema and the
// TypeScript types of docs/ and the web client are generated from it, and
// the gateway routes by it.

// Services that serve methods.
const (
	ServiceGateway   = "gateway"
	ServiceAgentd    = "agentd"
	ServiceTermhost  = "termhost"
	ServiceScheduler = "scheduler"
	ServiceManager   = "manager"
	// ServiceEvery stands for every service the manager links to: each
	// serves the link methods it names through shared/service, and sends
	// the link notifications it names.
	ServiceEvery = "every"
)

// Surfaces: where a method is called.
const (
	// SurfaceBusiness is JSON-RPC over the gateway's WebSocket (and each
	// business service's own socket behind it).
	SurfaceBusiness = "business"
	// SurfaceControl is the manager's POST /control/rpc.
	SurfaceControl = "control"
	// SurfaceLocal is a service's own socket (in the user's private
	// runtime folder) only: the gateway does not forward it. Methods that
	// write files where they are told (store/backup) are local.
	SurfaceLocal = "local"
	// SurfaceLink is the manager's private link socket (manager.sock
	// mgmt.RouteLink, in the user's private runtime folder), never the
	// gateway's: the manager and each service call each other there. The
	// manager serves what a service sends it; a service serves, on its end,
	// what the manager calls.
	SurfaceLink = "link"
)

// Empty is the params or result of a method that takes or returns nothing
// (an empty object on the wire).
type Empty = struct{}

// MethodSpec describes one method.
type MethodSpec struct {
	Name string
	// Service serves the method; the gateway forwards a business method to
	// it (the gateway's own methods name the gateway).
	Service string
	// AlsoServedBy are the services that serve the method too on their
	// own sockets (initialize: every business service does its handshake).
	AlsoServedBy []string
	Surface      string
	// Params and Result are zero values of the types on the wire.
	Params, Result any
	// Errors are the codes the method may return beyond CommonErrors.
	Errors []errs.Code
	// DrainSafe methods are served while the service drains.
	DrainSafe bool
	// Retry is RetryNever, RetrySafe or RetryKeyed.
	Retry string
	// Summary is one line for docs/PROTOCOL.md.
	Summary string
}

// NotificationSpec describes one notification.
type NotificationSpec struct {
	Name string
	// Service sends the notification (the gateway passes it on).
	Service string
	// Surface is where it is received: SurfaceBusiness (clients), or
	// SurfaceLink for what only the manager and the services see.
	Surface string
	// LinkHandler is the side whose link handler takes it, when it travels
	// the link: service.phase goes from the manager to every service, the
	// gateway handles it (and passes it on to its clients), the others
	// ignore it.
	LinkHandler string
	Params      any
	Summary     string
}

// ParamsType and ResultType are the Go types on the wire.
func (m MethodSpec) ParamsType() reflect.Type { return reflect.TypeOf(m.Params) }

// ResultType is the type of the method's result.
func (m MethodSpec) ResultType() reflect.Type { return reflect.TypeOf(m.Result) }

// Serves reports whether service serves the method.
func (m MethodSpec) Serves(service string) bool {
	return m.Service == service || slices.Contains(m.AlsoServedBy, service)
}

// CommonErrors may come from any method: malformed or oversized requests,
// handshake order, drain, overload and the service's own failures.
var CommonErrors = []errs.Code{
	errs.ParseError, errs.InvalidRequest, errs.MethodNotFound, errs.InvalidParams, errs.Internal,
	errs.NotInitialized, errs.RequestTooLarge, errs.ResponseTooLarge, errs.Overloaded,
	errs.ServiceDraining, errs.ServiceUnavailable, errs.ConnectionLost,
}

var (
	threadErrs  = []errs.Code{errs.NotFound}
	submitErrs  = []errs.Code{errs.NotFound, errs.Conflict, errs.DuplicateMessageConflict, errs.WorkspaceUntrusted, errs.Unauthorized, errs.LeaseLost}
	ownerErrs   = []errs.Code{errs.NotFound, errs.Conflict, errs.Unauthorized, errs.LeaseLost}
	termErrs    = []errs.Code{errs.NotFound, errs.NotImplemented}
	automErrs   = []errs.Code{errs.NotFound, errs.Conflict}
	controlErrs = []errs.Code{errs.Unauthorized, errs.Forbidden, errs.HostRejected, errs.OriginRejected}
)

// Contract lists every method, in the order of docs/PROTOCOL.md.
var Contract = []MethodSpec{
	{Name: MethodInitialize, Service: ServiceGateway, AlsoServedBy: []string{ServiceAgentd, ServiceTermhost}, Surface: SurfaceBusiness,
		Params: InitializeParams{}, Result: InitializeResult{}, Errors: []errs.Code{errs.ProtocolMismatch, errs.AlreadyInitialized},
		DrainSafe: true, Retry: RetryNever, Summary: "the handshake: protocol version, capabilities, subscription"},
	{Name: MethodShutdown, Service: ServiceGateway, Surface: SurfaceBusiness, Params: Empty{}, Result: Empty{},
		DrainSafe: true, Retry: RetryNever, Summary: "ends this connection (not the service) after the answer"},

	{Name: MethodThreadStart, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadStartParams{}, Result: ThreadResult{},
		Errors: []errs.Code{errs.NotFound, errs.WorkspaceUntrusted, errs.Unauthorized, errs.LeaseLost}, Retry: RetryNever,
		Summary: "creates a thread in a workspace"},
	{Name: MethodThreadList, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: PageParams{}, Result: ThreadListResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "one page of threads"},
	{Name: MethodThreadRead, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadRef{}, Result: ThreadReadResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a thread and its turns"},
	{Name: MethodThreadRename, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadRenameParams{}, Result: ThreadResult{},
		Errors: threadErrs, Retry: RetryNever, Summary: "sets a thread's title"},
	{Name: MethodThreadArchive, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadArchiveParams{}, Result: ThreadResult{},
		Errors: threadErrs, Retry: RetryNever, Summary: "archives a thread, or brings it back"},
	{Name: MethodThreadImport, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadImportParams{}, Result: ThreadResult{},
		Errors: []errs.Code{errs.WorkspaceUntrusted, errs.LeaseLost}, Retry: RetryNever,
		Summary: "creates a thread from a transcript's records (new ids; keys and fingerprints kept)"},
	{Name: MethodStoreVerify, Service: ServiceAgentd, Surface: SurfaceLocal, Params: StoreVerifyParams{}, Result: StoreVerifyResult{},
		Errors: []errs.Code{errs.NotFound}, DrainSafe: true, Retry: RetrySafe,
		Summary: "compares each thread's transcript with the database and lists the disagreements"},
	{Name: MethodStoreBackup, Service: ServiceAgentd, Surface: SurfaceLocal, Params: StoreBackupParams{}, Result: StoreBackupResult{},
		Errors: []errs.Code{errs.Conflict, errs.StorageFull}, DrainSafe: true, Retry: RetryNever,
		Summary: "writes a consistent online copy of the database and the transcripts into a new file, verified"},
	{Name: MethodThreadSearch, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadSearchParams{}, Result: ThreadSearchResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "threads whose title or messages contain a text"},
	{Name: MethodWorkspaceList, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: WorkspaceListParams{}, Result: WorkspaceListResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "recently used workspaces"},
	{Name: MethodProfileList, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: Empty{}, Result: ProfileListResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "the profiles and their providers"},
	{Name: MethodThreadWorkspace, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ThreadWorkspaceParams{}, Result: ThreadWorkspaceResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a thread's workspace and whether it is trusted (termhost asks it before opening a terminal)"},
	{Name: MethodTurnStart, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnSubmitParams{}, Result: TurnSubmitResult{},
		Errors: submitErrs, Retry: RetryKeyed, Summary: "starts a turn on an idle thread (keyed by messageId)"},
	{Name: MethodTurnEnqueue, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnSubmitParams{}, Result: TurnSubmitResult{},
		Errors: submitErrs, Retry: RetryKeyed, Summary: "queues a turn behind the active one (keyed by messageId)"},
	{Name: MethodTurnSteer, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnSteerParams{}, Result: TurnSteerResult{},
		Errors: append(slices.Clone(submitErrs), errs.InputDeliveryPending, errs.InputDeliveryUncertain), Retry: RetryKeyed,
		Summary: "adds input to the running turn, with a delivery receipt (keyed by messageId)"},
	{Name: MethodTurnInterrupt, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnRef{}, Result: TurnResult{},
		Errors: ownerErrs, DrainSafe: true, Retry: RetryNever, Summary: "interrupts a turn"},
	{Name: MethodTurnRead, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnRef{}, Result: TurnReadResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a turn and its items"},
	{Name: MethodTurnInputRead, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnInputReadParams{}, Result: TurnInputReadResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "the input receipt recorded under a messageId"},
	{Name: MethodTurnItemBlob, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: TurnItemBlobParams{}, Result: TurnItemBlobResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a byte range of an item's blob (output, before, after)"},
	{Name: MethodEventReplay, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ReplayParams{}, Result: ReplayResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a byte-bounded page of a thread's durable events"},
	{Name: MethodApprovalList, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: ApprovalListParams{}, Result: ApprovalListResult{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "pending approvals"},
	{Name: MethodApprovalReply, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: RespondParams{}, Result: ApprovalResult{},
		Errors: ownerErrs, DrainSafe: true, Retry: RetryNever, Summary: "decides an approval (compare-and-set on its revision)"},
	{Name: MethodAgentRun, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: AgentRunParams{}, Result: AgentReceipt{},
		Errors: submitErrs, Retry: RetryNever, Summary: "starts a logical agent"},
	{Name: MethodAgentContinue, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: AgentContinueParams{}, Result: AgentReceipt{},
		Errors: submitErrs, Retry: RetryNever, Summary: "gives a logical agent its next prompt"},
	{Name: MethodAgentShow, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: AgentRef{}, Result: AgentView{},
		Errors: threadErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a logical agent's status and response"},
	{Name: MethodAgentList, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: Empty{}, Result: AgentListResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "the logical agents"},

	{Name: MethodTerminalCreate, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalCreateParams{}, Result: TerminalCreateResult{},
		Errors: append(slices.Clone(termErrs), errs.WorkspaceUntrusted), Retry: RetryNever, Summary: "opens a terminal in a thread's workspace"},
	{Name: MethodTerminalInput, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalInputParams{}, Result: Empty{},
		Errors: termErrs, Retry: RetryNever, Summary: "writes to a terminal"},
	{Name: MethodTerminalResize, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalResizeParams{}, Result: Empty{},
		Errors: termErrs, Retry: RetryNever, Summary: "resizes a terminal"},
	{Name: MethodTerminalClose, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalRef{}, Result: TerminalInfo{},
		Errors: termErrs, DrainSafe: true, Retry: RetryNever, Summary: "ends a terminal and answers once it exited"},
	{Name: MethodTerminalList, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalListParams{}, Result: TerminalListResult{},
		Errors: termErrs, DrainSafe: true, Retry: RetrySafe, Summary: "a thread's terminals"},
	{Name: MethodTerminalRead, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalReadParams{}, Result: TerminalReadResult{},
		Errors: termErrs, DrainSafe: true, Retry: RetrySafe, Summary: "retained output of a terminal from an offset"},

	{Name: MethodAutomationCreate, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationCreateParams{}, Result: AutomationResult{},
		Errors: []errs.Code{errs.NotFound, errs.WorkspaceUntrusted, errs.ServiceUnavailable}, Retry: RetryNever,
		Summary: "creates an automation (a cron schedule and a prompt) and its thread"},
	{Name: MethodAutomationList, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: PageParams{}, Result: AutomationListResult{},
		DrainSafe: true, Retry: RetrySafe, Summary: "one page of automations"},
	{Name: MethodAutomationRead, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRef{}, Result: AutomationResult{},
		Errors: automErrs, DrainSafe: true, Retry: RetrySafe, Summary: "an automation"},
	{Name: MethodAutomationUpdate, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationUpdateParams{}, Result: AutomationResult{},
		Errors: append(slices.Clone(automErrs), errs.WorkspaceUntrusted), DrainSafe: true, Retry: RetryNever,
		Summary: "changes an automation (compare-and-set on its revision)"},
	{Name: MethodAutomationDelete, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRef{}, Result: AutomationDeleteResult{},
		Errors: automErrs, DrainSafe: true, Retry: RetryNever, Summary: "deletes an automation"},
	{Name: MethodAutomationPause, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRef{}, Result: AutomationResult{},
		Errors: automErrs, DrainSafe: true, Retry: RetryNever, Summary: "stops an automation's schedule"},
	{Name: MethodAutomationResume, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRef{}, Result: AutomationResult{},
		Errors: automErrs, DrainSafe: true, Retry: RetryNever, Summary: "restarts an automation's schedule"},
	{Name: MethodAutomationRun, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRunParams{}, Result: AutomationRunResult{},
		Errors: append(slices.Clone(automErrs), errs.DuplicateMessageConflict), Retry: RetryKeyed,
		Summary: "runs an automation now (keyed by requestId)"},
	{Name: MethodAutomationRuns, Service: ServiceScheduler, Surface: SurfaceBusiness, Params: AutomationRunsParams{}, Result: AutomationRunsResult{},
		Errors: automErrs, DrainSafe: true, Retry: RetrySafe, Summary: "one page of an automation's runs, newest first"},

	{Name: mgmt.MethodStatus, Service: ServiceManager, Surface: SurfaceControl, Params: Empty{}, Result: mgmt.Status{},
		Errors: controlErrs, DrainSafe: true, Retry: RetrySafe, Summary: "the instance's status"},
	{Name: mgmt.MethodStop, Service: ServiceManager, Surface: SurfaceControl, Params: mgmt.StopParams{}, Result: mgmt.PhaseResult{},
		Errors: append(slices.Clone(controlErrs), errs.DrainTimeout), DrainSafe: true, Retry: RetryNever, Summary: "stops the instance (draining first unless told not to)"},
	{Name: mgmt.MethodDrain, Service: ServiceManager, Surface: SurfaceControl, Params: mgmt.DrainParams{}, Result: mgmt.PhaseResult{},
		Errors: append(slices.Clone(controlErrs), errs.DrainTimeout), DrainSafe: true, Retry: RetryNever, Summary: "pauses new work and waits for running work"},
	{Name: mgmt.MethodResume, Service: ServiceManager, Surface: SurfaceControl, Params: Empty{}, Result: mgmt.PhaseResult{},
		Errors: controlErrs, DrainSafe: true, Retry: RetryNever, Summary: "ends a drain"},
	{Name: mgmt.MethodIssue, Service: ServiceManager, Surface: SurfaceControl, Params: Empty{}, Result: mgmt.TicketResult{},
		Errors: append(slices.Clone(controlErrs), errs.ServiceNotRunning), DrainSafe: true, Retry: RetryNever, Summary: "a one-time browser ticket from the gateway"},

	// The link. Drain-safe all: a drain is itself carried by it, and a
	// drained service must still hear resume.
	{Name: mgmt.MethodServiceRegister, Service: ServiceManager, Surface: SurfaceLink, Params: mgmt.RegisterParams{}, Result: mgmt.RegisterResult{},
		DrainSafe: true, Retry: RetryNever, Summary: "a service announces itself (replacing an older registration of its name) and learns the instance and its phase"},
	{Name: mgmt.MethodServiceDrain, Service: ServiceEvery, Surface: SurfaceLink, Params: Empty{}, Result: mgmt.ActivityParams{},
		DrainSafe: true, Retry: RetrySafe, Summary: "pauses the service's admission of new work; answers its activity after"},
	{Name: mgmt.MethodServiceResume, Service: ServiceEvery, Surface: SurfaceLink, Params: Empty{}, Result: mgmt.ActivityParams{},
		DrainSafe: true, Retry: RetrySafe, Summary: "opens admission again; answers the activity after"},
	{Name: mgmt.MethodServiceCancel, Service: ServiceEvery, Surface: SurfaceLink, Params: Empty{}, Result: mgmt.ActivityParams{},
		DrainSafe: true, Retry: RetrySafe, Summary: "stops the service's running work (stop --cancel-running); answers the activity after"},
	{Name: mgmt.MethodGatewayIssueTicket, Service: ServiceGateway, Surface: SurfaceLink, Params: Empty{}, Result: mgmt.IssuedTicket{},
		DrainSafe: true, Retry: RetryNever, Summary: "a fresh single-use browser ticket, for auth/issue"},
}

// ServicePhaseParams are the params of service.phase.
type ServicePhaseParams struct {
	Phase string `json:"phase"`
}

// Notifications lists every notification a client receives.
var Notifications = []NotificationSpec{
	{Name: NotifyThreadEvent, Service: ServiceAgentd, Surface: SurfaceBusiness, Params: Event{}, Summary: "one durable event of a thread, as event/replay returns it"},
	{Name: NotifyServicePhase, Service: ServiceManager, Surface: SurfaceBusiness, LinkHandler: ServiceGateway, Params: ServicePhaseParams{},
		Summary: "the instance's phase changed (running, draining, stopping)"},
	{Name: NotifyTerminalOutput, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalOutputNotification{}, Summary: "new terminal output (a hint: read gaps back with terminal/read)"},
	{Name: NotifyTerminalExit, Service: ServiceTermhost, Surface: SurfaceBusiness, Params: TerminalExitNotification{}, Summary: "a terminal's process exited"},
	{Name: mgmt.NotifyServiceActivity, Service: ServiceEvery, Surface: SurfaceLink, LinkHandler: ServiceManager, Params: mgmt.ActivityParams{},
		Summary: "a service's activity, draining or readiness changed (coalesced, latest wins; the manager keeps the highest seq)"},
}

var byName = func() map[string]*MethodSpec {
	m := make(map[string]*MethodSpec, len(Contract))
	for i := range Contract {
		if _, dup := m[Contract[i].Name]; dup {
			panic("api: method declared twice in the contract: " + Contract[i].Name)
		}
		m[Contract[i].Name] = &Contract[i]
	}
	return m
}()

// Lookup finds a method's spec.
func Lookup(method string) (MethodSpec, bool) {
	m, ok := byName[method]
	if !ok {
		return MethodSpec{}, false
	}
	return *m, true
}

// ServedBy lists the names of the methods service serves on its own
// sockets (the link's aside: see LinkServedBy), sorted.
func ServedBy(service string) []string {
	var out []string
	for _, m := range Contract {
		if m.Surface != SurfaceLink && m.Serves(service) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

// LinkServedBy lists the names of the link methods and notifications side
// handles on its end of the link, sorted: ServiceManager for the
// manager's, ServiceEvery for what shared/service serves for every
// service, a service's name for its own extras (its LinkRPC).
func LinkServedBy(side string) []string {
	var out []string
	for _, m := range Contract {
		if m.Surface == SurfaceLink && m.Service == side {
			out = append(out, m.Name)
		}
	}
	for _, n := range Notifications {
		if n.LinkHandler == side {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// LookupNotification finds a notification's spec.
func LookupNotification(name string) (NotificationSpec, bool) {
	for _, n := range Notifications {
		if n.Name == name {
			return n, true
		}
	}
	return NotificationSpec{}, false
}

// Route is the service a business method goes to behind the gateway; ok
// is false for a method the contract does not list or that the gateway
// serves itself.
func Route(method string) (service string, ok bool) {
	m, found := byName[method]
	if !found || m.Surface != SurfaceBusiness || m.Service == ServiceGateway {
		return "", false
	}
	return m.Service, true
}

func requestRetry() map[string]string {
	out := map[string]string{}
	for _, m := range Contract {
		if m.Surface == SurfaceBusiness && m.Retry != RetryNever {
			out[m.Name] = m.Retry
		}
	}
	return out
}

// PayloadTypes are wire types that appear inside raw members (event and
// item payloads): the schema and the TypeScript types describe them too.
var PayloadTypes = []reflect.Type{
	reflect.TypeFor[TurnPayload](),
	reflect.TypeFor[ItemPayload](),
	reflect.TypeFor[TurnSteeredPayload](),
	reflect.TypeFor[UserPayload](),
}
