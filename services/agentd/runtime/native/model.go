package native

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/openai/openai-go/v3"
)

// entryKind is what one conversation entry is.
type entryKind int

const (
	userText entryKind = iota
	assistantText
	toolCallEntry
	toolResultEntry
)

// entry is one element of the conversation in the runtime's own,
// dialect-neutral form; each model client turns the list into its API's
// messages.
type entry struct {
	kind entryKind
	text string
	call callSpec // toolCallEntry, and the call a toolResultEntry answers
	// isError marks a tool result of a call that failed or did not run.
	isError bool
	// item is the item the entry comes from ("" for this turn's new ones).
	item string
	turn string
}

// callSpec is a tool call the model asked for.
type callSpec struct {
	ID   string
	Name string
	Args string // JSON
}

// toolSpec is a tool offered to the model.
type toolSpec struct {
	Name        string
	Description string
	Parameters  map[string]any
}

// request is one model request.
type request struct {
	model     string
	reasoning string
	system    string
	entries   []entry
	tools     []toolSpec
	maxOutput int64
}

// streamSink receives an answer's output as it streams.
type streamSink struct {
	text      func(delta string)
	reasoning func(delta string)
}

// answer is a model's whole answer to one request.
type answer struct {
	text      string
	reasoning string
	calls     []callSpec
	usage     Usage
}

// model streams answers of one model API.
type model interface {
	stream(ctx context.Context, req request, out streamSink) (answer, error)
}

// maxRetries bounds the SDKs' retries of a request answered 408, 409, 429
// or 5xx (or not answered): they wait as Retry-After (or Retry-After-Ms)
// says, else back off exponentially from half a second.
const maxRetries = 3

// httpClient is shared by every model client: one pool of kept-alive
// connections per endpoint, whatever turn uses it.
var httpClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          64,
	MaxIdleConnsPerHost:   16,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   15 * time.Second,
	ResponseHeaderTimeout: 5 * time.Minute,
}}

type clientKey struct{ api, baseURL, key string }

var (
	clientsMu sync.Mutex
	clients   = map[clientKey]model{}
)

// modelFor returns the (cached) client of a turn's model API.
func modelFor(t Turn) (model, error) {
	p := t.Profile
	k := clientKey{p.API, strings.TrimRight(p.BaseURL, "/"), t.APIKey}
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if m := clients[k]; m != nil {
		return m, nil
	}
	var m model
	switch p.API {
	case "responses":
		m = newResponsesModel(k.baseURL, k.key)
	case "chat":
		m = newChatModel(k.baseURL, k.key)
	case "anthropic":
		m = newAnthropicModel(k.baseURL, k.key)
	default:
		e := errs.New(errs.ProviderUnavailable, "profile %q: api %q is not a model API; set profiles.%s.api to responses, chat or anthropic", t.ProfileName, p.API, t.ProfileName)
		e.Retryable = false
		return nil, e
	}
	if len(clients) > 64 {
		clear(clients)
	}
	clients[k] = m
	return m, nil
}

// modelError maps a failed model request to deepcode's codes: what the
// model API said (status and message), never the request or its
// credentials.
func modelError(err error, t Turn) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	where := t.Profile.BaseURL
	if where == "" {
		where = "the " + t.Profile.API + " API's default endpoint"
	}
	status, msg := 0, ""
	var oe *openai.Error
	var ae *anthropic.Error
	switch {
	case errors.As(err, &oe):
		status, msg = oe.StatusCode, oe.Message
		if msg == "" {
			msg = apiErrorMessage(oe.RawJSON())
		}
	case errors.As(err, &ae):
		status = ae.StatusCode
		msg = apiErrorMessage(ae.RawJSON())
	}
	msg = strings.TrimSpace(msg)
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	if msg != "" {
		msg = ": " + msg
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e := errs.New(errs.ProviderAuthFailed, "the model API at %s refused the credentials (HTTP %d%s); check the key in profiles.%s.credentials_file or agentd's environment", where, status, msg, t.ProfileName)
		return e
	case status == http.StatusTooManyRequests:
		return errs.New(errs.ProviderRateLimited, "the model API at %s is rate limiting (HTTP 429%s) and still was after %d retries; try again later", where, msg, maxRetries)
	case status == http.StatusNotFound:
		e := errs.New(errs.ProviderUnavailable, "the model API at %s does not know this request (HTTP 404%s); check profiles.%s.base_url, api and model", where, msg, t.ProfileName)
		e.Retryable = false
		return e
	case status == 529 || status >= 500:
		return errs.New(errs.ProviderUnavailable, "the model API at %s failed (HTTP %d%s) and still did after %d retries", where, status, msg, maxRetries)
	case status >= 400:
		return errs.New(errs.TaskFailed, "the model API at %s refused the request (HTTP %d%s)", where, status, msg)
	}
	var se *streamError
	if errors.As(err, &se) {
		return se.toErr(where)
	}
	var ne net.Error
	var oe2 *net.OpError
	if errors.As(err, &ne) || errors.As(err, &oe2) || strings.Contains(err.Error(), "connection refused") || errors.Is(err, errUnexpectedEOF) {
		return errs.Wrap(err, errs.ProviderUnavailable, "cannot reach the model API at %s; is the server running?", where)
	}
	return errs.Wrap(err, errs.ProviderUnavailable, "the model request to %s failed", where)
}

var errUnexpectedEOF = errors.New("unexpected EOF")

// apiErrorMessage is the message of an API error body ({"error":{"message"}}
// or {"message"}).
func apiErrorMessage(raw string) string {
	var b struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if jsonUnmarshal([]byte(raw), &b) == nil {
		if b.Error.Message != "" {
			return b.Error.Message
		}
		return b.Message
	}
	return ""
}

// streamError is an error the model reported inside a stream (a failed
// response, an error event).
type streamError struct {
	code string
	msg  string
}

func (e *streamError) Error() string { return fmt.Sprintf("model stream error %s: %s", e.code, e.msg) }

func (e *streamError) toErr(where string) error {
	c := strings.ToLower(e.code + " " + e.msg)
	switch {
	case strings.Contains(c, "rate_limit") || strings.Contains(c, "overloaded"):
		return errs.New(errs.ProviderRateLimited, "the model API at %s is overloaded: %s", where, e.msg)
	case strings.Contains(c, "auth") || strings.Contains(c, "permission"):
		return errs.New(errs.ProviderAuthFailed, "the model API at %s refused the credentials: %s", where, e.msg)
	case strings.Contains(c, "server_error") || strings.Contains(c, "api_error"):
		return errs.New(errs.ProviderUnavailable, "the model API at %s failed: %s", where, e.msg)
	}
	return errs.New(errs.TaskFailed, "the model failed the request: %s %s", e.code, e.msg)
}
