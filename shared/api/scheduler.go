package api

import (
	"encoding/json"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// The wire types of the scheduler's methods (automations and their runs).

// Automation is the wire form of an automation.
type Automation struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Cron            string          `json:"cron"`
	TimeZone        string          `json:"timeZone"`
	Workspace       string          `json:"workspace"`
	Profile         string          `json:"profile"`
	Prompt          string          `json:"prompt"`
	Enabled         bool            `json:"enabled"`
	MissedRunPolicy string          `json:"missedRunPolicy"`
	ThreadID        string          `json:"threadId"`
	NextFireAt      *time.Time      `json:"nextFireAt"`
	LastResult      json.RawMessage `json:"lastResult"`
	CreatedAt       time.Time       `json:"createdAt"`
	UpdatedAt       time.Time       `json:"updatedAt"`
	Revision        int64           `json:"revision"`
}

// Missed describes the occurrences a run row stands for that were missed.
type Missed struct {
	Count   int       `json:"count"`
	From    time.Time `json:"from"`
	Through time.Time `json:"through"`
}

// AutomationRun is the wire form of an automation run.
type AutomationRun struct {
	ID           string     `json:"id"`
	AutomationID string     `json:"automationId"`
	ScheduledAt  time.Time  `json:"scheduledAt"`
	Trigger      string     `json:"trigger"`
	RequestID    string     `json:"requestId,omitempty"`
	Status       string     `json:"status"`
	ThreadID     string     `json:"threadId"`
	TurnID       string     `json:"turnId,omitempty"`
	MessageID    string     `json:"messageId"`
	Error        *errs.Wire `json:"error,omitempty"`
	Missed       *Missed    `json:"missed,omitempty"`
	CreatedAt    time.Time  `json:"createdAt"`
	UpdatedAt    time.Time  `json:"updatedAt"`
}

// AutomationCreateParams are automation/create's.
type AutomationCreateParams struct {
	Name            string `json:"name"`
	Cron            string `json:"cron"`
	TimeZone        string `json:"timeZone,omitempty"`
	Workspace       string `json:"workspace"`
	Profile         string `json:"profile,omitempty"`
	Prompt          string `json:"prompt"`
	MissedRunPolicy string `json:"missedRunPolicy,omitempty"`
	// Trust is the explicit, recorded grant for the workspace (--trust).
	Trust bool `json:"trust,omitempty"`
}

// AutomationUpdateParams are automation/update's: revision is the one
// read; omitted members keep their value.
type AutomationUpdateParams struct {
	AutomationID    string  `json:"automationId"`
	Revision        int64   `json:"revision"`
	Name            *string `json:"name,omitempty"`
	Cron            *string `json:"cron,omitempty"`
	TimeZone        *string `json:"timeZone,omitempty"`
	Workspace       *string `json:"workspace,omitempty"`
	Profile         *string `json:"profile,omitempty"`
	Prompt          *string `json:"prompt,omitempty"`
	MissedRunPolicy *string `json:"missedRunPolicy,omitempty"`
	Trust           bool    `json:"trust,omitempty"`
}

// AutomationRef names an automation.
type AutomationRef struct {
	AutomationID string `json:"automationId"`
}

// AutomationResult answers the methods that return one automation.
type AutomationResult struct {
	Automation *Automation `json:"automation"`
}

// AutomationListResult answers automation/list.
type AutomationListResult struct {
	Automations []*Automation `json:"automations"`
	NextCursor  string        `json:"nextCursor,omitempty"`
}

// AutomationDeleteResult answers automation/delete.
type AutomationDeleteResult struct {
	AutomationID string `json:"automationId"`
	Deleted      bool   `json:"deleted"`
}

// AutomationRunParams are automation/run's.
type AutomationRunParams struct {
	AutomationID string `json:"automationId"`
	RequestID    string `json:"requestId"`
}

// AutomationRunResult answers automation/run.
type AutomationRunResult struct {
	Run       *AutomationRun `json:"run"`
	Duplicate bool           `json:"duplicate,omitempty"`
}

// AutomationRunsParams are automation/runs'.
type AutomationRunsParams struct {
	AutomationID string `json:"automationId"`
	Cursor       string `json:"cursor,omitempty"`
	Limit        int    `json:"limit,omitempty"`
}

// AutomationRunsResult answers automation/runs.
type AutomationRunsResult struct {
	Runs       []*AutomationRun `json:"runs"`
	NextCursor string           `json:"nextCursor,omitempty"`
}
