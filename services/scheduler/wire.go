package scheduler

import "github.com/deepcode-dev/deepcode/shared/api"

// The scheduler's wire types are the contract's (shared/api); these names
// keep the package's code short.
type (
	Automation    = api.Automation
	Missed        = api.Missed
	CreateParams  = api.AutomationCreateParams
	UpdateParams  = api.AutomationUpdateParams
	RunParams     = api.AutomationRunParams
	automationRef = api.AutomationRef
	pageParams    = api.PageParams
	runsParams    = api.AutomationRunsParams
)
