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

// ThreadRenameParams are the parameters of thread/rename.
type ThreadRenameParams struct {
	ThreadID string `json:"threadId"`
	Title    string `json:"title"`
}

// ThreadArchiveParams are the parameters of thread/archive. Archived
// defaults to true; false brings the thread back.
type ThreadArchiveParams struct {
	ThreadID string `json:"threadId"`
	Archived *bool  `json:"archived,omitempty"`
}

// ThreadSearchParams are the parameters of thread/search.
type ThreadSearchParams struct {
	Query string `json:"query"`
	Limit int    `json:"limit,omitempty"`
}

// SearchHit is one thread thread/search found, with where it matched.
type SearchHit struct {
	Thread Thread `json:"thread"`
	// Field is "title" or "text" (a user or agent message).
	Field string `json:"field"`
	// Snippet is plain text around the first match (at most about 120
	// characters), empty for a title match.
	Snippet string `json:"snippet"`
}

// ThreadSearchResult answers thread/search.
type ThreadSearchResult struct {
	Hits []SearchHit `json:"hits"`
}

// WorkspaceListParams are the parameters of workspace/list.
type WorkspaceListParams struct {
	Limit int `json:"limit,omitempty"`
}

// WorkspaceInfo is one workspace of workspace/list.
type WorkspaceInfo struct {
	Path        string `json:"path"`
	Trusted     bool   `json:"trusted"`
	ThreadCount int    `json:"threadCount"`
	LastUsedAt  string `json:"lastUsedAt,omitempty"`
}

// WorkspaceListResult answers workspace/list.
type WorkspaceListResult struct {
	Workspaces []WorkspaceInfo `json:"workspaces"`
}

// ProfileInfo is one profile of profile/list: its name and runtime, never
// its command, environment or credentials.
type ProfileInfo struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	Default  bool   `json:"default,omitempty"`
}

// ProfileListResult answers profile/list.
type ProfileListResult struct {
	Profiles []ProfileInfo `json:"profiles"`
}
