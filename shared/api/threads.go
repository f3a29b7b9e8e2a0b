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

func init() {
	// Reads may be repeated. Rename and archive set a value, but stay
	// "never" like every write that is not keyed.
	RequestRetry[MethodThreadSearch] = RetrySafe
	RequestRetry[MethodWorkspaceList] = RetrySafe
	RequestRetry[MethodProfileList] = RetrySafe
}
