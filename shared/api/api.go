// Package api names the business protocol shared by the gateway, the
// services behind it and the clients: methods, their retry contract,
// notifications, and the initialize handshake.
package api

// Methods of the business protocol (the gateway's WebSocket and the
// services behind it). Each is described once in Contract (contract.go).
const (
	MethodInitialize = "initialize"
	MethodShutdown   = "shutdown"

	MethodThreadStart = "thread/start"
	MethodThreadList  = "thread/list"
	MethodThreadRead  = "thread/read"
	// MethodThreadWorkspace answers a thread's workspace and whether it is
	// trusted: termhost asks it before it opens a terminal there, rather
	// than reading agentd's tables itself.
	MethodThreadWorkspace = "thread/workspace"
	MethodTurnStart       = "turn/start"
	MethodTurnEnqueue     = "turn/enqueue"
	MethodTurnSteer       = "turn/steer"
	MethodTurnInterrupt   = "turn/interrupt"
	MethodTurnRead        = "turn/read"
	MethodTurnInputRead   = "turn/input/read"
	MethodTurnItemBlob    = "turn/item/blob"
	MethodEventReplay     = "event/replay"
	MethodApprovalList    = "approval/list"
	MethodApprovalReply   = "approval/respond"
	MethodAgentRun        = "agent/run"
	MethodAgentContinue   = "agent/continue"
	MethodAgentShow       = "agent/show"
	MethodAgentList       = "agent/list"

	MethodTerminalCreate = "terminal/create"
	MethodTerminalInput  = "terminal/input"
	MethodTerminalResize = "terminal/resize"
	MethodTerminalClose  = "terminal/close"
	MethodTerminalList   = "terminal/list"
	MethodTerminalRead   = "terminal/read"

	MethodAutomationCreate = "automation/create"
	MethodAutomationList   = "automation/list"
	MethodAutomationRead   = "automation/read"
	MethodAutomationUpdate = "automation/update"
	MethodAutomationDelete = "automation/delete"
	MethodAutomationPause  = "automation/pause"
	MethodAutomationResume = "automation/resume"
	MethodAutomationRun    = "automation/run"
	MethodAutomationRuns   = "automation/runs"
)

// Notifications.
const (
	NotifyThreadEvent    = "thread.event"
	NotifyServicePhase   = "service.phase"
	NotifyTerminalOutput = "terminal.output"
	NotifyTerminalExit   = "terminal.exit"
)

// Retry policies advertised in capabilities.requestRetry.
const (
	RetryNever = "never"
	RetrySafe  = "safe"
	RetryKeyed = "keyed"
)

// RetryPolicies are every retry policy (the schema's RetryPolicy enum).
var RetryPolicies = []string{RetryNever, RetrySafe, RetryKeyed}

// RequestRetry is the retry contract, as initialize advertises it: the
// methods whose Contract entry is safe or keyed. A method missing here is
// "never": nothing is inferred from names. Safe methods may be repeated;
// keyed ones only with their original non-empty key and the same request.
var RequestRetry = requestRetry()

// DrainAllowed reports whether the contract lets method be served while
// the service drains: what finishes current work (approvals, interrupts,
// terminal close), the changes that start no work, and safe reads.
func DrainAllowed(method string) bool {
	m, ok := Lookup(method)
	return ok && m.DrainSafe
}

// ClientInfo identifies a client in initialize.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Surface records provenance ("cli", "web", "desktop", "tui");
	// it grants nothing.
	Surface string `json:"surface,omitempty"`
}

// InitializeParams are the parameters of initialize.
type InitializeParams struct {
	ProtocolVersion string     `json:"protocolVersion"`
	ClientInfo      ClientInfo `json:"clientInfo"`
	FrontendBuildID string     `json:"frontendBuildId,omitempty"`
}

// Capabilities of a server.
type Capabilities struct {
	RequestRetry map[string]string `json:"requestRetry"`
}

// ServiceInfo is added for network clients.
type ServiceInfo struct {
	InstanceID    string `json:"instanceId"`
	SchemaVersion int    `json:"schemaVersion"`
	Transport     string `json:"transport"`
	ShutdownScope string `json:"shutdownScope"`
	// FrontendBuildID identifies the packaged web client the gateway
	// serves; the page checks it against its own before normal use.
	FrontendBuildID string `json:"frontendBuildId,omitempty"`
	// Phase is the service's phase when the connection initialized
	// ("running", "draining", "stopping"); later changes arrive as
	// service.phase notifications.
	Phase string `json:"phase,omitempty"`
}

// InitializeResult answers initialize.
type InitializeResult struct {
	// ProtocolVersion is the version this side speaks.
	ProtocolVersion string `json:"protocolVersion"`
	// AcceptedVersions are the client versions it accepts (a newer minor
	// of the same major too: see AcceptedProtocolVersions).
	AcceptedVersions []string     `json:"acceptedProtocolVersions"`
	Capabilities     Capabilities `json:"capabilities"`
	ServiceInfo      *ServiceInfo `json:"serviceInfo,omitempty"`
}
