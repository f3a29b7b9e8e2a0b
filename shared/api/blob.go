package api

// The deepcode provider's item blobs (area: native runtime): what an item
// keeps whole beside its payload — a shell call's whole output ("output"),
// a changed file before and after the change ("before", "after").

// TurnItemBlobParams are turn/item/blob's parameters.
type TurnItemBlobParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
	ItemID   string `json:"itemId"`
	// Name is the blob: "output", "before" or "after".
	Name string `json:"name"`
	// Offset is the first byte to read (0 if omitted).
	Offset int64 `json:"offset,omitempty"`
	// MaxBytes bounds the bytes read (default and most: MaxBlobRead).
	MaxBytes int `json:"maxBytes,omitempty"`
}

// MaxBlobRead is the most bytes one turn/item/blob call returns.
const MaxBlobRead = 256 << 10

// TurnItemBlobResult is turn/item/blob's result.
type TurnItemBlobResult struct {
	Name string `json:"name"`
	// Size is the whole blob's size in bytes.
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
	// Data holds the bytes read (base64 in JSON).
	Data       []byte `json:"data"`
	NextOffset int64  `json:"nextOffset"`
	EOF        bool   `json:"eof"`
}
