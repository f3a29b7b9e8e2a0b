package native

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

var jsonUnmarshal = json.Unmarshal

func openaiClient(baseURL, key string) openai.Client {
	opts := []option.RequestOption{option.WithHTTPClient(httpClient), option.WithMaxRetries(maxRetries)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	} else {
		// A local server that takes no key: the SDK sends one anyway.
		opts = append(opts, option.WithAPIKey("none"))
	}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(baseURL+"/"))
	}
	return openai.NewClient(opts...)
}

// ---- OpenAI Responses ----

type responsesModel struct{ c openai.Client }

func newResponsesModel(baseURL, key string) *responsesModel {
	return &responsesModel{c: openaiClient(baseURL, key)}
}

func (m *responsesModel) stream(ctx context.Context, req request, out streamSink) (answer, error) {
	var input responses.ResponseInputParam
	for _, e := range req.entries {
		switch e.kind {
		case userText:
			input = append(input, responses.ResponseInputItemParamOfMessage(e.text, responses.EasyInputMessageRoleUser))
		case assistantText:
			input = append(input, responses.ResponseInputItemParamOfMessage(e.text, responses.EasyInputMessageRoleAssistant))
		case toolCallEntry:
			input = append(input, responses.ResponseInputItemParamOfFunctionCall(e.call.Args, e.call.ID, e.call.Name))
		case toolResultEntry:
			it := responses.ResponseInputItemParamOfFunctionCallOutput(e.text)
			it.OfFunctionCallOutput.CallID = openai.String(e.call.ID)
			input = append(input, it)
		}
	}
	var tools []responses.ToolUnionParam
	for _, t := range req.tools {
		tools = append(tools, responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: t.Parameters, Strict: openai.Bool(false),
		}})
	}
	params := responses.ResponseNewParams{
		Model:             req.model,
		Input:             responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools:             tools,
		Store:             openai.Bool(false),
		ParallelToolCalls: openai.Bool(true),
		MaxOutputTokens:   openai.Int(req.maxOutput),
	}
	if req.system != "" {
		params.Instructions = openai.String(req.system)
	}
	if req.reasoning != "" {
		params.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(req.reasoning), Summary: shared.ReasoningSummaryAuto}
	}
	st := m.c.Responses.NewStreaming(ctx, params)
	defer st.Close()
	var a answer
	sawText := false
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.output_text.delta":
			sawText = true
			a.text += ev.Delta
			out.text(ev.Delta)
		case "response.reasoning_summary_text.delta":
			a.reasoning += ev.Delta
			out.reasoning(ev.Delta)
		case "response.output_item.done":
			switch ev.Item.Type {
			case "function_call":
				a.calls = append(a.calls, callSpec{ID: ev.Item.CallID, Name: ev.Item.Name, Args: ev.Item.Arguments.OfString})
			case "message":
				if !sawText {
					// A server that sends the message whole, without deltas.
					for _, c := range ev.Item.Content {
						if c.Text != "" {
							a.text += c.Text
							out.text(c.Text)
						}
					}
				}
			}
		case "response.completed", "response.incomplete":
			u := ev.Response.Usage
			a.usage = Usage{InputTokens: u.InputTokens, CachedInputTokens: u.InputTokensDetails.CachedTokens,
				OutputTokens: u.OutputTokens, ReasoningTokens: u.OutputTokensDetails.ReasoningTokens, TotalTokens: u.TotalTokens}
		case "response.failed":
			return a, &streamError{code: string(ev.Response.Error.Code), msg: ev.Response.Error.Message}
		case "error":
			return a, &streamError{code: ev.Code, msg: ev.Message}
		}
	}
	return a, st.Err()
}

// ---- OpenAI-compatible Chat Completions ----

type chatModel struct{ c openai.Client }

func newChatModel(baseURL, key string) *chatModel {
	return &chatModel{c: openaiClient(baseURL, key)}
}

func (m *chatModel) stream(ctx context.Context, req request, out streamSink) (answer, error) {
	var msgs []openai.ChatCompletionMessageParamUnion
	if req.system != "" {
		msgs = append(msgs, openai.SystemMessage(req.system))
	}
	// The assistant message being built: its text and tool calls.
	var asst *openai.ChatCompletionAssistantMessageParam
	flush := func() {
		if asst != nil {
			msgs = append(msgs, openai.ChatCompletionMessageParamUnion{OfAssistant: asst})
			asst = nil
		}
	}
	for _, e := range req.entries {
		switch e.kind {
		case userText:
			flush()
			msgs = append(msgs, openai.UserMessage(e.text))
		case assistantText:
			flush()
			asst = &openai.ChatCompletionAssistantMessageParam{}
			asst.Content.OfString = openai.String(e.text)
		case toolCallEntry:
			if asst == nil {
				asst = &openai.ChatCompletionAssistantMessageParam{}
			}
			asst.ToolCalls = append(asst.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: e.call.ID, Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: e.call.Name, Arguments: e.call.Args},
			}})
		case toolResultEntry:
			flush()
			msgs = append(msgs, openai.ToolMessage(e.text, e.call.ID))
		}
	}
	flush()
	var tools []openai.ChatCompletionToolUnionParam
	for _, t := range req.tools {
		tools = append(tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: t.Name, Description: openai.String(t.Description), Parameters: shared.FunctionParameters(t.Parameters),
		}))
	}
	params := openai.ChatCompletionNewParams{
		Model:         req.model,
		Messages:      msgs,
		Tools:         tools,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		MaxTokens:     openai.Int(req.maxOutput),
	}
	if req.reasoning != "" {
		params.ReasoningEffort = shared.ReasoningEffort(req.reasoning)
	}
	st := m.c.Chat.Completions.NewStreaming(ctx, params)
	defer st.Close()
	var a answer
	// Tool calls arrive in pieces keyed by index: the id and name once,
	// the arguments split over many chunks (local servers split them
	// finely).
	type partial struct{ id, name, args string }
	calls := map[int64]*partial{}
	for st.Next() {
		ch := st.Current()
		if ch.JSON.Usage.Valid() && ch.Usage.TotalTokens > 0 {
			u := ch.Usage
			a.usage = Usage{InputTokens: u.PromptTokens, CachedInputTokens: u.PromptTokensDetails.CachedTokens,
				OutputTokens: u.CompletionTokens, ReasoningTokens: u.CompletionTokensDetails.ReasoningTokens, TotalTokens: u.TotalTokens}
		}
		for _, c := range ch.Choices {
			d := c.Delta
			if d.Content != "" {
				a.text += d.Content
				out.text(d.Content)
			}
			// reasoning_content: what DeepSeek, Qwen and llama.cpp's
			// server stream of the model's reasoning.
			if f, ok := d.JSON.ExtraFields["reasoning_content"]; ok && f.Raw() != "" && f.Raw() != "null" {
				var r string
				if json.Unmarshal([]byte(f.Raw()), &r) == nil && r != "" {
					a.reasoning += r
					out.reasoning(r)
				}
			}
			for _, tc := range d.ToolCalls {
				p := calls[tc.Index]
				if p == nil {
					p = &partial{}
					calls[tc.Index] = p
				}
				if tc.ID != "" {
					p.id = tc.ID
				}
				p.name += tc.Function.Name
				p.args += tc.Function.Arguments
			}
		}
	}
	if err := st.Err(); err != nil {
		return a, err
	}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	for _, i := range idx {
		p := calls[i]
		if p.args == "" {
			p.args = "{}"
		}
		a.calls = append(a.calls, callSpec{ID: p.id, Name: p.name, Args: p.args})
	}
	return a, nil
}
