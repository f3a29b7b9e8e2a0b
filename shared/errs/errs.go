// Package errs is deepcode's one table of error codes. Every error that crosses
// a process boundary (JSON-RPC, HTTP management routes, CLI output) is an
// *Error carrying a stable Code and whether the caller may retry.
package errs

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable error class. Never rename one: clients
// and scripts match on them.
type Code string

// JSON-RPC 2.0 protocol-level codes.
const (
	ParseError     Code = "PARSE_ERROR"
	InvalidRequest Code = "INVALID_REQUEST"
	MethodNotFound Code = "METHOD_NOT_FOUND"
	InvalidParams  Code = "INVALID_PARAMS"
	Internal       Code = "INTERNAL"
)

// Application codes.
const (
	NotFound           Code = "NOT_FOUND"
	Unauthorized       Code = "UNAUTHORIZED"
	Forbidden          Code = "FORBIDDEN"
	HostRejected       Code = "HOST_REJECTED"
	OriginRejected     Code = "ORIGIN_REJECTED"
	IdentityMismatch   Code = "IDENTITY_MISMATCH"
	ChallengeReplayed  Code = "CHALLENGE_REPLAYED"
	NotImplemented     Code = "NOT_IMPLEMENTED"
	NotInitialized     Code = "NOT_INITIALIZED"
	AlreadyInitialized Code = "ALREADY_INITIALIZED"
	ProtocolMismatch   Code = "PROTOCOL_MISMATCH"
	RequestTooLarge    Code = "REQUEST_TOO_LARGE"
	ResponseTooLarge   Code = "RESPONSE_TOO_LARGE"
	Overloaded         Code = "OVERLOADED"
	Conflict           Code = "CONFLICT"
	ServiceDraining    Code = "SERVICE_DRAINING"
	ServiceUnavailable Code = "SERVICE_UNAVAILABLE"
	// ServiceStopping: the service is on its way out (a graceful stop is
	// running); retry once it is back, or after `service start`.
	ServiceStopping          Code = "SERVICE_STOPPING"
	ServiceNotRunning        Code = "SERVICE_NOT_RUNNING"
	AlreadyRunning           Code = "ALREADY_RUNNING"
	InstanceReplaced         Code = "INSTANCE_REPLACED"
	PortInUse                Code = "PORT_IN_USE"
	PortChangeRefused        Code = "PORT_CHANGE_REFUSED"
	StartFailed              Code = "START_FAILED"
	StartTimeout             Code = "START_TIMEOUT"
	StopTimeout              Code = "STOP_TIMEOUT"
	DrainTimeout             Code = "DRAIN_TIMEOUT"
	InvalidDatabasePath      Code = "INVALID_DATABASE_PATH"
	RuntimeDirInsecure       Code = "RUNTIME_DIR_INSECURE"
	ConfigInvalid            Code = "CONFIG_INVALID"
	UsageError               Code = "USAGE_ERROR"
	LeaseLost                Code = "LEASE_LOST"
	LeaseHeld                Code = "LEASE_HELD"
	SchemaTooNew             Code = "SCHEMA_TOO_NEW"
	DuplicateMessageConflict Code = "DUPLICATE_MESSAGE_CONFLICT"
	InputDeliveryPending     Code = "INPUT_DELIVERY_PENDING"
	InputDeliveryUncertain   Code = "INPUT_DELIVERY_UNCERTAIN"
	ProviderUnavailable      Code = "PROVIDER_UNAVAILABLE"
	ProviderCancelled        Code = "PROVIDER_CANCELLED"
	// ProviderAuthFailed: the runtime's model provider refused its
	// credentials (fix the credential file or environment, then retry).
	ProviderAuthFailed Code = "PROVIDER_AUTH_FAILED"
	// ProviderRateLimited: the runtime's model provider is rate limiting
	// or overloaded.
	ProviderRateLimited Code = "PROVIDER_RATE_LIMITED"
	WorkspaceConflict   Code = "WORKSPACE_CONFLICT"
	DaemonTimeout       Code = "DAEMON_TIMEOUT"
	WorkerCrashed       Code = "WORKER_CRASHED"
	// ConnectionLost: the connection ended before the answer arrived, so the
	// outcome of the call is unknown. Not retryable: read state first.
	ConnectionLost Code = "CONNECTION_LOST"
	// WorkspaceUntrusted: the workspace has not been trusted; pass --trust
	// (trust: true) once to record the grant.
	WorkspaceUntrusted Code = "WORKSPACE_UNTRUSTED"
	// TaskFailed: the agent's task ran and failed (a command's non-zero
	// exit status, a script's fail step).
	TaskFailed Code = "TASK_FAILED"
	// ReplayGap: an event/replay cursor is beyond the thread's head (a
	// cursor from another database or from before a restore); data carries
	// headSequence. Replay from 0 or from the head, not from the cursor.
	ReplayGap Code = "REPLAY_GAP"
	// StorageFull: the database's filesystem is full; data carries the
	// path and the free bytes. Retry once space is freed.
	StorageFull Code = "STORAGE_FULL"
	// StorageReadOnly: the database or its folder cannot be written (a
	// read-only mount or file); data carries the path.
	StorageReadOnly Code = "STORAGE_READONLY"
	// TUIUnavailable: the terminal UI's binary (deepcode-tui) is not where
	// deepcode looks for it, or cannot run: reinstall, or set
	// DEEPCODE_LIBEXEC to its folder.
	TUIUnavailable Code = "TUI_UNAVAILABLE"
)

type classInfo struct {
	rpcCode   int
	retryable bool
	http      int
}

// table is the one place that maps a code to its JSON-RPC code, HTTP status
// and default retryability.
var table = map[Code]classInfo{
	ParseError:     {-32700, false, 400},
	InvalidRequest: {-32600, false, 400},
	MethodNotFound: {-32601, false, 404},
	InvalidParams:  {-32602, false, 400},
	Internal:       {-32603, false, 500},

	NotFound:                 {-32000, false, 404},
	Unauthorized:             {-32000, false, 401},
	Forbidden:                {-32000, false, 403},
	HostRejected:             {-32000, false, 403},
	OriginRejected:           {-32000, false, 403},
	IdentityMismatch:         {-32000, false, 409},
	ChallengeReplayed:        {-32000, false, 409},
	NotImplemented:           {-32000, false, 501},
	NotInitialized:           {-32000, false, 400},
	AlreadyInitialized:       {-32000, false, 400},
	ProtocolMismatch:         {-32000, false, 400},
	RequestTooLarge:          {-32000, false, 413},
	ResponseTooLarge:         {-32000, false, 500},
	Overloaded:               {-32000, true, 503},
	Conflict:                 {-32000, false, 409},
	ServiceDraining:          {-32000, true, 503},
	ServiceUnavailable:       {-32000, true, 503},
	ServiceStopping:          {-32000, true, 503},
	ServiceNotRunning:        {-32000, false, 503},
	AlreadyRunning:           {-32000, false, 409},
	InstanceReplaced:         {-32000, false, 409},
	PortInUse:                {-32000, false, 409},
	PortChangeRefused:        {-32000, false, 409},
	StartFailed:              {-32000, false, 500},
	StartTimeout:             {-32000, true, 504},
	StopTimeout:              {-32000, true, 504},
	DrainTimeout:             {-32000, true, 504},
	InvalidDatabasePath:      {-32000, false, 400},
	RuntimeDirInsecure:       {-32000, false, 500},
	ConfigInvalid:            {-32000, false, 400},
	UsageError:               {-32000, false, 400},
	LeaseLost:                {-32000, false, 409},
	LeaseHeld:                {-32000, true, 409},
	SchemaTooNew:             {-32000, false, 500},
	DuplicateMessageConflict: {-32000, false, 409},
	InputDeliveryPending:     {-32000, true, 409},
	InputDeliveryUncertain:   {-32000, false, 409},
	ProviderUnavailable:      {-32000, true, 503},
	ProviderCancelled:        {-32000, false, 409},
	ProviderAuthFailed:       {-32000, false, 502},
	ProviderRateLimited:      {-32000, true, 429},
	WorkspaceConflict:        {-32000, false, 409},
	DaemonTimeout:            {-32000, true, 504},
	WorkerCrashed:            {-32000, false, 500},
	ConnectionLost:           {-32000, false, 502},
	WorkspaceUntrusted:       {-32000, false, 403},
	TaskFailed:               {-32000, false, 422},
	ReplayGap:                {-32000, false, 409},
	StorageFull:              {-32000, true, 507},
	StorageReadOnly:          {-32000, false, 503},
	TUIUnavailable:           {-32000, false, 500},
}

// Known reports whether c is in the table.
func (c Code) Known() bool { _, ok := table[c]; return ok }

// Retryable is the default retryability of the code.
func (c Code) Retryable() bool { return table[c].retryable }

// RPCCode is the JSON-RPC error.code for c: the -32600 family for protocol
// errors, -32000 for application errors.
func (c Code) RPCCode() int {
	if info, ok := table[c]; ok {
		return info.rpcCode
	}
	return -32000
}

// HTTPStatus is the status a plain HTTP route answers with for c.
func (c Code) HTTPStatus() int {
	if info, ok := table[c]; ok {
		return info.http
	}
	return 500
}

// Codes lists every code in the table (for documentation and tests).
func Codes() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	return out
}

// Error is the one error type that crosses boundaries.
type Error struct {
	Code      Code
	Message   string
	Retryable bool
	// Data holds extra, non-secret members serialised beside code and
	// retryable (e.g. "replacedBy").
	Data  map[string]any
	cause error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the internal cause to errors.Is/As. The cause is never
// serialised: internal causes stay in logs.
func (e *Error) Unwrap() error { return e.cause }

// With adds an extra data member and returns e.
func (e *Error) With(key string, value any) *Error {
	if e.Data == nil {
		e.Data = map[string]any{}
	}
	e.Data[key] = value
	return e
}

// New makes an *Error whose retryability is the code's default.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Retryable()}
}

// Wrap is New with an internal cause kept for logs and errors.Is.
func Wrap(cause error, code Code, format string, args ...any) *Error {
	e := New(code, format, args...)
	e.cause = cause
	return e
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// From turns any error into an *Error; an unclassified error becomes
// INTERNAL with a generic message so internal causes never leak.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := As(err); ok {
		return e
	}
	return Wrap(err, Internal, "internal error")
}

// CodeOf is the code of err, or "" for nil.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	return From(err).Code
}

// Is reports whether err carries code.
func Is(err error, code Code) bool {
	e, ok := As(err)
	return ok && e.Code == code
}

// Wire is the JSON object clients see: the CLI prints {"error": Wire}, HTTP
// routes answer with it, and JSON-RPC errors carry code and retryable in data.
type Wire struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// ToWire is the public part of e.
func (e *Error) ToWire() Wire {
	return Wire{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
}
