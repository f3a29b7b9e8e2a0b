package native

import (
	"context"
	"encoding/json"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// ---- Anthropic Messages ----

type anthropicModel struct{ c anthropic.Client }

func newAnthropicModel(baseURL, key string) *anthropicModel {
	// Credentials and endpoint come from the profile only: the SDK's
	// environment chain (profiles, federation) is not agentd's.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithHTTPClient(httpClient), option.WithMaxRetries(maxRetries)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(baseURL+"/"))
	}
	return &anthropicModel{c: anthropic.NewClient(opts...)}
}

func (m *anthropicModel) stream(ctx context.Context, req request, out streamSink) (answer, error) {
	// Messages alternate between user and assistant; consecutive entries
	// of one side share a message.
	var msgs []anthropic.MessageParam
	var blocks []anthropic.ContentBlockParamUnion
	side := ""
	flush := func() {
		if len(blocks) == 0 {
			return
		}
		if side == "user" {
			msgs = append(msgs, anthropic.NewUserMessage(blocks...))
		} else {
			msgs = append(msgs, anthropic.NewAssistantMessage(blocks...))
		}
		blocks = nil
	}
	add := func(s string, b anthropic.ContentBlockParamUnion) {
		if s != side {
			flush()
			side = s
		}
		blocks = append(blocks, b)
	}
	for _, e := range req.entries {
		switch e.kind {
		case userText:
			add("user", anthropic.NewTextBlock(e.text))
		case assistantText:
			if e.text != "" {
				add("assistant", anthropic.NewTextBlock(e.text))
			}
		case toolCallEntry:
			var input any = json.RawMessage(e.call.Args)
			if !json.Valid([]byte(e.call.Args)) {
				input = map[string]any{}
			}
			add("assistant", anthropic.NewToolUseBlock(e.call.ID, input, e.call.Name))
		case toolResultEntry:
			add("user", anthropic.NewToolResultBlock(e.call.ID, e.text, e.isError))
		}
	}
	flush()
	var tools []anthropic.ToolUnionParam
	for _, t := range req.tools {
		schema := anthropic.ToolInputSchemaParam{Properties: t.Parameters["properties"]}
		if r, ok := t.Parameters["required"].([]string); ok {
			schema.Required = r
		}
		tools = append(tools, anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{
			Name: t.Name, Description: anthropic.String(t.Description), InputSchema: schema,
		}})
	}
	params := anthropic.MessageNewParams{
		Model:     req.model,
		MaxTokens: req.maxOutput,
		Messages:  msgs,
		Tools:     tools,
	}
	if req.system != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.system}}
	}
	st := m.c.Messages.NewStreaming(ctx, params)
	defer st.Close()
	var a answer
	type block struct {
		kind string
		call callSpec
	}
	open := map[int64]*block{}
	var order []int64
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			a.usage.InputTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
			a.usage.CachedInputTokens = u.CacheReadInputTokens
			a.usage.OutputTokens = u.OutputTokens
		case "content_block_start":
			b := &block{kind: ev.ContentBlock.Type}
			if b.kind == "tool_use" {
				b.call = callSpec{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}
			}
			if ev.ContentBlock.Text != "" {
				a.text += ev.ContentBlock.Text
				out.text(ev.ContentBlock.Text)
			}
			open[ev.Index] = b
			order = append(order, ev.Index)
		case "content_block_delta":
			d := ev.Delta
			switch d.Type {
			case "text_delta":
				a.text += d.Text
				out.text(d.Text)
			case "thinking_delta":
				a.reasoning += d.Thinking
				out.reasoning(d.Thinking)
			case "input_json_delta":
				if b := open[ev.Index]; b != nil {
					b.call.Args += d.PartialJSON
				}
			}
		case "message_delta":
			if ev.Usage.OutputTokens > 0 {
				a.usage.OutputTokens = ev.Usage.OutputTokens
			}
		}
	}
	a.usage.TotalTokens = a.usage.InputTokens + a.usage.OutputTokens
	if err := st.Err(); err != nil {
		return a, err
	}
	for _, i := range order {
		if b := open[i]; b != nil && b.kind == "tool_use" {
			if b.call.Args == "" {
				b.call.Args = "{}"
			}
			a.calls = append(a.calls, b.call)
		}
	}
	return a, nil
}
