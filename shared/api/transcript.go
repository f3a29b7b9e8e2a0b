package api

import (
	"encoding/json"
	"time"
)

// Methods of canonical transcripts, backups and imports (agentd).
const (
	MethodThreadImport = "thread/import"
	MethodStoreVerify  = "store/verify"
	MethodStoreBackup  = "store/backup"
)

// TranscriptVersion is the version of the canonical transcript records
// agentd writes. A reader skips (and reports) a record of a newer version.
const TranscriptVersion = 1

// The kinds of canonical transcript records (TranscriptRecord.Type).
const (
	RecordThreadCreated    = "thread.created"
	RecordThreadUpdated    = "thread.updated"
	RecordInput            = "input"
	RecordTurnQueued       = EventTurnQueued
	RecordTurnStarted      = EventTurnStarted
	RecordTurnEnded        = "turn.ended"
	RecordItem             = "item"
	RecordApprovalRequest  = EventApprovalRequest
	RecordApprovalResolved = EventApprovalResolved
)

// TranscriptRecord is one line of a thread's canonical transcript
// ($DEEPCODE_HOME/sessions/<thread>.jsonl): the append-only record from
// which the database's threads, turns, items and input receipts can be
// rebuilt. Exactly one of the typed members is set, as Type says.
type TranscriptRecord struct {
	V        int       `json:"v"`
	Type     string    `json:"type"`
	At       time.Time `json:"at"`
	ThreadID string    `json:"threadId"`
	TurnID   string    `json:"turnId,omitempty"`
	// Internal marks a record that is not conversation (token usage, a
	// context-trimming note): reconciliation leaves it out of the
	// comparison of conversation text.
	Internal bool `json:"internal,omitempty"`
	// Backfill marks a record written afterwards from the database (a
	// thread older than transcripts), not as its change was committed: its
	// time is the database's, and nothing absent from the database (a
	// fingerprint, an intermediate item state) is made up.
	Backfill bool `json:"backfill,omitempty"`

	Thread   *TranscriptThread   `json:"thread,omitempty"`
	Input    *TranscriptInput    `json:"input,omitempty"`
	Turn     *TranscriptTurn     `json:"turn,omitempty"`
	Item     *TranscriptItem     `json:"item,omitempty"`
	Approval *TranscriptApproval `json:"approval,omitempty"`
}

// TranscriptThread is a thread as created or as changed (title, archive).
type TranscriptThread struct {
	Workspace string `json:"workspace,omitempty"`
	Profile   string `json:"profile,omitempty"`
	Title     string `json:"title"`
	Kind      string `json:"kind,omitempty"`
	Archived  bool   `json:"archived,omitempty"`
}

// TranscriptInput is a user input with what its receipt needs: the key
// (messageId), the request's fingerprint (absent on legacy records, and
// never made up), the submission and, for a steer, the turn it was sent to
// (expectedTurnId). A steer's deliveryState is always "unknown" here: the
// transcript proves that the input was persisted, not that the running
// turn's mailbox took it.
type TranscriptInput struct {
	ItemID         string `json:"itemId"`
	MessageID      string `json:"messageId"`
	Fingerprint    string `json:"fingerprint,omitempty"`
	Submission     string `json:"submission"`
	ExpectedTurnID string `json:"expectedTurnId,omitempty"`
	DeliveryState  string `json:"deliveryState,omitempty"`
	Text           string `json:"text"`
}

// TranscriptTurn is a turn boundary: queued (with what it was submitted
// with), started, or ended (with its status, error and response).
type TranscriptTurn struct {
	Ordinal    int        `json:"ordinal,omitempty"`
	Submission string     `json:"submission,omitempty"`
	MessageID  string     `json:"messageId,omitempty"`
	Profile    string     `json:"profile,omitempty"`
	Model      string     `json:"model,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
	Status     string     `json:"status,omitempty"`
	Error      *TurnError `json:"error,omitempty"`
	Response   string     `json:"response,omitempty"`
}

// TranscriptItem is a completed item of a turn: an agent message, a
// command, a file change, a tool call.
type TranscriptItem struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Status  string          `json:"status"`
	Payload json.RawMessage `json:"payload"`
}

// TranscriptApproval is an approval asked for or decided.
type TranscriptApproval struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind,omitempty"`
	Summary   string          `json:"summary,omitempty"`
	Details   json.RawMessage `json:"details,omitempty"`
	Decision  string          `json:"decision,omitempty"`
	DecidedBy string          `json:"decidedBy,omitempty"`
}

// StoreBackupParams are the parameters of store/backup: a consistent
// online copy of the database and the transcripts into one new file.
type StoreBackupParams struct {
	// Path is the backup file to write; it must not exist, and its folder
	// must.
	Path string `json:"path"`
}

// StoreBackupResult answers store/backup, after the copy was verified.
type StoreBackupResult struct {
	Path          string           `json:"path"`
	Bytes         int64            `json:"bytes"`
	SchemaVersion int              `json:"schemaVersion"`
	Integrity     string           `json:"integrity"`
	Rows          map[string]int64 `json:"rows"`
	Transcripts   int              `json:"transcripts"`
}

// StoreVerifyParams are the parameters of store/verify.
type StoreVerifyParams struct {
	// ThreadID limits the check to one thread.
	ThreadID string `json:"threadId,omitempty"`
}

// StoreVerifyResult answers store/verify: each disagreement between a
// thread's transcript and the database, as a record.
type StoreVerifyResult struct {
	Threads       int                 `json:"threads"`
	Records       int                 `json:"records"`
	Disagreements []TranscriptFinding `json:"disagreements"`
	// BackfillPending is how many threads older than transcripts still
	// wait for agentd to write theirs from the database (each is reported
	// missingTranscript until then).
	BackfillPending int `json:"backfillPending,omitempty"`
}

// TranscriptFinding is one disagreement (or a torn line) found by
// store/verify or a rebuild.
type TranscriptFinding struct {
	ThreadID string `json:"threadId"`
	// Kind: missingTranscript, missingThread, tornLine, unknownVersion,
	// missingInProjection, missingInTranscript, textDiffers, statusDiffers.
	Kind   string `json:"kind"`
	TurnID string `json:"turnId,omitempty"`
	ItemID string `json:"itemId,omitempty"`
	Line   int    `json:"line,omitempty"`
	Detail string `json:"detail"`
}

// ThreadImportParams are the parameters of thread/import: a transcript's
// records (one thread), turned into a new thread with new ids; keys and
// fingerprints are kept.
type ThreadImportParams struct {
	Workspace string             `json:"workspace,omitempty"`
	Trust     bool               `json:"trust,omitempty"`
	Records   []TranscriptRecord `json:"records"`
}
