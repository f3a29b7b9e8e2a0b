package mgmt

// The link: JSON-RPC between the manager and each service over a WebSocket
// on manager.sock (RouteLink), in the user's private runtime folder. The
// gateway never forwards it. Each service registers and reports its
// activity; the manager drains, resumes and cancels them, tells them its
// phase (api.NotifyServicePhase) and asks the gateway for tickets.

// RouteLink is the link's WebSocket route on manager.sock.
const RouteLink = "/internal/rpc"

// Methods and notifications of the link. The manager serves
// MethodServiceRegister and NotifyServiceActivity; every service serves
// the others (shared/service), the gateway MethodGatewayIssueTicket too.
const (
	MethodServiceRegister = "service/register"
	MethodServiceDrain    = "service/drain"
	MethodServiceResume   = "service/resume"
	MethodServiceCancel   = "service/cancel"
	NotifyServiceActivity = "service.activity"
	// MethodGatewayIssueTicket is what auth/issue asks the gateway, which
	// alone holds tickets and sessions in memory.
	MethodGatewayIssueTicket = "gateway/issueTicket"
)

// RegisterParams is what a service tells the manager when it connects.
type RegisterParams struct {
	Name     string   `json:"name"`
	PID      int      `json:"pid"`
	Version  string   `json:"version"`
	Protocol string   `json:"protocolVersion"`
	Activity Activity `json:"activity"`
	Draining bool     `json:"draining"`
	// NotReady is set while the service runs but refuses writes.
	NotReady NotReady `json:"notReady,omitzero"`
	// Stopping: the service's graceful stop runs (it exits at its end).
	Stopping bool `json:"stopping,omitempty"`
	// Address is the TCP address a service serves, if any (the gateway).
	Address string `json:"address,omitempty"`
}

// RegisterResult is the manager's answer to service/register.
type RegisterResult struct {
	InstanceID    string `json:"instanceId"`
	Phase         string `json:"phase"`
	SchemaVersion int    `json:"schemaVersion"`
}

// ActivityParams is the service.activity notification, and the answer to
// service/drain, service/resume and service/cancel. Seq orders reports of one
// service process: the manager keeps the report with the highest Seq, so a
// reply computed before a notification never overwrites it.
type ActivityParams struct {
	Activity Activity `json:"activity"`
	Draining bool     `json:"draining"`
	NotReady NotReady `json:"notReady,omitzero"`
	Stopping bool     `json:"stopping,omitempty"`
	Seq      uint64   `json:"seq"`
}

// IssuedTicket is the gateway's answer to gateway/issueTicket: a fresh
// single-use browser ticket (auth/issue adds the instance id).
type IssuedTicket struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expiresIn"`
}
