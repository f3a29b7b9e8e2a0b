package api

// Methods for the thread list, the workspace picker and the profile picker
// (docs/PROTOCOL.md, agentd).
const (
	MethodThreadRename  = "thread/rename"
	MethodThreadArchive = "thread/archive"
	MethodThreadSearch  = "thread/search"
	MethodWorkspaceList = "workspace/list"
	MethodProfileList   = "profile/list"
)
