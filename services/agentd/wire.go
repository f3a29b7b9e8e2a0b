package agentd

import "github.com/deepcode-dev/deepcode/shared/api"

// agentd's wire types are the contract's (shared/api); these names keep
// the package's code short.
type (
	Thread            = api.Thread
	TurnError         = api.TurnError
	Turn              = api.Turn
	Item              = api.Item
	UserPayload       = api.UserPayload
	Event             = api.Event
	Approval          = api.Approval
	Input             = api.Input
	ThreadStartParams = api.ThreadStartParams
	TurnSubmitParams  = api.TurnSubmitParams
	TurnSubmitResult  = api.TurnSubmitResult
	TurnSteerParams   = api.TurnSteerParams
	TurnSteerResult   = api.TurnSteerResult
	RespondParams     = api.RespondParams
	ReplayParams      = api.ReplayParams
	ReplayResult      = api.ReplayResult
	AgentRunParams    = api.AgentRunParams
	AgentReceipt      = api.AgentReceipt
	AgentView         = api.AgentView
	AgentSummary      = api.AgentSummary
)
