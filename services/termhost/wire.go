package termhost

import "github.com/deepcode-dev/deepcode/shared/api"

// termhost's wire types are the contract's (shared/api); these names keep
// the package's code short.
type (
	CreateParams       = api.TerminalCreateParams
	CreateResult       = api.TerminalCreateResult
	TerminalRef        = api.TerminalRef
	InputParams        = api.TerminalInputParams
	ResizeParams       = api.TerminalResizeParams
	ReadParams         = api.TerminalReadParams
	ReadResult         = api.TerminalReadResult
	ListParams         = api.TerminalListParams
	ListResult         = api.TerminalListResult
	Info               = api.TerminalInfo
	OutputNotification = api.TerminalOutputNotification
	ExitNotification   = api.TerminalExitNotification
)

// Notifications.
const (
	NotifyOutput = api.NotifyTerminalOutput
	NotifyExit   = api.NotifyTerminalExit
)
