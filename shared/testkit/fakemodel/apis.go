package fakemodel

import (
	"encoding/json"
	"net/http"
	"slices"
)

// toolName picks the tool a request offers: the first of prefer
// that it lists, else the first of prefer.
func toolName(tools []string, prefer ...string) string {
	for _, p := range prefer {
		if slices.Contains(tools, p) {
			return p
		}
	}
	return prefer[0]
}

// ---- OpenAI Responses (codex) ----

type responsesReq struct {
	Model        string            `json:"model"`
	Instructions string            `json:"instructions"`
	Input        []json.RawMessage `json:"input"`
	Tools        []struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tools"`
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	var req responsesReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var tools []string
	freeformPatch := false // apply_patch as a custom (freeform) tool
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
		freeformPatch = freeformPatch || t.Name == "apply_patch" && t.Type == "custom"
	}
	var steps []step
	var prompt, transcript string
	var results, all []string
	for _, raw := range req.Input {
		var it struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Output  json.RawMessage `json:"output"`
		}
		_ = json.Unmarshal(raw, &it)
		switch {
		case (it.Type == "message" || it.Type == "") && it.Role == "user":
			transcript += textOf(it.Content) + "\n"
			if text := textOf(it.Content); parse(text) != nil {
				steps, prompt, results = parse(text), text, nil
			}
		case it.Type == "function_call_output" || it.Type == "custom_tool_call_output" || it.Type == "local_shell_call_output":
			results = append(results, textOf(it.Output))
			all = append(all, textOf(it.Output))
		}
	}
	s.record(Request{API: "responses", Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Model: req.Model, Prompt: prompt, Tools: tools,
		Transcript: transcript, ToolResults: results, AllToolResults: all, System: req.Instructions})
	p := planFor(steps, len(results))
	if s.failNow(p, prompt) {
		errorStatus(w, "responses", p)
		return
	}
	if !wait(r, p.sleep) {
		return
	}
	e := newSSE(w)
	respID := s.id("resp")
	e.event("response.created", map[string]any{"type": "response.created", "response": map[string]any{"id": respID}})
	idx := 0
	if len(p.think) > 0 {
		rsID := s.id("rs")
		e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx,
			"item": map[string]any{"type": "reasoning", "id": rsID, "summary": []any{}}})
		text := ""
		for _, c := range p.think {
			if !wait(r, p.delay) {
				return
			}
			text += c
			e.event("response.reasoning_summary_text.delta", map[string]any{"type": "response.reasoning_summary_text.delta", "item_id": rsID, "output_index": idx, "summary_index": 0, "delta": c})
		}
		e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx,
			"item": map[string]any{"type": "reasoning", "id": rsID, "summary": []any{map[string]any{"type": "summary_text", "text": text}}}})
		idx++
	}
	if len(p.chunks) > 0 {
		msgID := s.id("msg")
		e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx,
			"item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "content": []any{}}})
		text := ""
		for _, c := range p.chunks {
			if !wait(r, p.delay) {
				return
			}
			text += c
			e.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": msgID, "output_index": idx, "content_index": 0, "delta": c})
		}
		e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx,
			"item": map[string]any{"type": "message", "id": msgID, "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}})
		idx++
	}
	for _, tc := range p.tools {
		item := map[string]any{"type": "function_call", "id": s.id("fc"), "call_id": s.id("call"), "name": tc.name, "arguments": "", "status": "in_progress"}
		e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx, "item": item})
		for _, piece := range chunked(tc.args, 16) {
			e.event("response.function_call_arguments.delta", map[string]any{"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": idx, "delta": piece})
		}
		item["arguments"], item["status"] = tc.args, "completed"
		e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
		idx++
	}
	if p.shell != "" || p.write != nil {
		item := codexCall(tools, freeformPatch, p)
		item["id"], item["call_id"] = s.id("fc"), s.id("call")
		e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": idx, "item": item})
		e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": idx, "item": item})
	}
	e.event("response.completed", map[string]any{"type": "response.completed", "response": map[string]any{"id": respID,
		"usage": map[string]any{"input_tokens": inTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": outTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": inTokens + outTokens}}})
}

// codexCall is the output item (without its ids) that asks codex for the
// plan's shell command or file write: a call of the freeform apply_patch
// tool (which takes the patch itself) or of the function one, else a shell
// call. Without an apply_patch tool (codex offers none to a model it does
// not know) the write is an apply_patch command, which codex intercepts and
// applies as a patch.
func codexCall(tools []string, freeformPatch bool, p plan) map[string]any {
	switch {
	case p.write != nil && freeformPatch:
		return map[string]any{"type": "custom_tool_call", "name": "apply_patch", "input": p.write.patch()}
	case p.write != nil && slices.Contains(tools, "apply_patch"):
		b, _ := json.Marshal(map[string]any{"input": p.write.patch()})
		return map[string]any{"type": "function_call", "name": "apply_patch", "arguments": string(b)}
	}
	command := p.shell
	if p.write != nil {
		command = "apply_patch <<'EOF'\n" + p.write.patch() + "EOF\n"
	}
	name := toolName(tools, "shell_command", "exec_command", "shell")
	var args any
	switch name {
	case "exec_command":
		args = map[string]any{"cmd": command}
	case "shell":
		args = map[string]any{"command": []string{"bash", "-lc", command}}
	default:
		args = map[string]any{"command": command}
	}
	b, _ := json.Marshal(args)
	return map[string]any{"type": "function_call", "name": name, "arguments": string(b)}
}

// ---- Anthropic Messages (claude) ----

type messagesReq struct {
	Model    string          `json:"model"`
	System   json.RawMessage `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req messagesReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Name)
	}
	var steps []step
	var prompt, transcript string
	var results, all []string
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		var parts []struct {
			Type    string          `json:"type"`
			Text    string          `json:"text"`
			Content json.RawMessage `json:"content"`
		}
		transcript += textOf(m.Content) + "\n"
		if json.Unmarshal(m.Content, &parts) != nil {
			// A string content.
			if text := textOf(m.Content); parse(text) != nil {
				steps, prompt, results = parse(text), text, nil
			}
			continue
		}
		// One message may hold tool results and text blocks (the
		// runtime's consecutive user entries): each text block counts as a
		// message of its own.
		for _, p := range parts {
			switch {
			case p.Type == "tool_result":
				results = append(results, textOf(p.Content))
				all = append(all, textOf(p.Content))
			case p.Type == "text" && parse(p.Text) != nil:
				steps, prompt, results = parse(p.Text), p.Text, nil
			}
		}
	}
	auth := r.Header.Get("x-api-key")
	if auth == "" {
		auth = r.Header.Get("Authorization")
	}
	s.record(Request{API: "messages", Path: r.URL.Path, Auth: auth, Model: req.Model, Prompt: prompt, Tools: tools,
		Transcript: transcript, ToolResults: results, AllToolResults: all, System: textOf(req.System)})
	p := planFor(steps, len(results))
	if s.failNow(p, prompt) {
		errorStatus(w, "messages", p)
		return
	}
	if !wait(r, p.sleep) {
		return
	}
	e := newSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": s.id("msg"), "type": "message", "role": "assistant", "model": req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": inTokens, "output_tokens": 1}}})
	idx := 0
	if len(p.think) > 0 {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}})
		for _, c := range p.think {
			if !wait(r, p.delay) {
				return
			}
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "thinking_delta", "thinking": c}})
		}
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "signature_delta", "signature": "sig-" + s.id("th")}})
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	if len(p.chunks) > 0 {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, c := range p.chunks {
			if !wait(r, p.delay) {
				return
			}
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "text_delta", "text": c}})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	stop := "end_turn"
	for _, tc := range p.tools {
		stop = "tool_use"
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "tool_use", "id": s.id("toolu"), "name": tc.name, "input": map[string]any{}}})
		for _, piece := range chunked(tc.args, 16) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
		idx++
	}
	if p.shell != "" || p.write != nil {
		stop = "tool_use"
		name := toolName(tools, "Bash", "bash", "shell")
		input := map[string]any{"command": p.shell, "description": "Run a command"}
		if p.write != nil {
			name, input = toolName(tools, "Write"), map[string]any{"file_path": p.write.path, "content": p.write.text + "\n"}
		}
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": idx, "content_block": map[string]any{"type": "tool_use", "id": s.id("toolu"), "name": name, "input": map[string]any{}}})
		b, _ := json.Marshal(input)
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(b)}})
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": idx})
	}
	e.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": outTokens}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// ---- OpenAI Chat Completions (opencode) ----

type chatReq struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var tools []string
	for _, t := range req.Tools {
		tools = append(tools, t.Function.Name)
	}
	var steps []step
	var prompt, transcript, system string
	var results, all []string
	for _, m := range req.Messages {
		switch m.Role {
		case "tool":
			results = append(results, textOf(m.Content))
			all = append(all, textOf(m.Content))
		case "system", "developer":
			system += textOf(m.Content)
		case "user":
			transcript += textOf(m.Content) + "\n"
			if text := textOf(m.Content); parse(text) != nil {
				steps, prompt, results = parse(text), text, nil
			}
		}
	}
	s.record(Request{API: "chat", Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Model: req.Model, Prompt: prompt, Tools: tools,
		Transcript: transcript, ToolResults: results, AllToolResults: all, System: system})
	p := planFor(steps, len(results))
	if s.failNow(p, prompt) {
		errorStatus(w, "chat", p)
		return
	}
	if !wait(r, p.sleep) {
		return
	}
	e := newSSE(w)
	id := s.id("chatcmpl")
	chunk := func(delta map[string]any, finish any, usage any) {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": 0, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if usage != nil {
			c["usage"] = usage
		}
		e.event("", c)
	}
	if p.split {
		s.chatLocal(r, e, chunk, p)
		return
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for _, c := range p.think {
		if !wait(r, p.delay) {
			return
		}
		chunk(map[string]any{"reasoning_content": c}, nil, nil)
	}
	for _, c := range p.chunks {
		if !wait(r, p.delay) {
			return
		}
		chunk(map[string]any{"content": c}, nil, nil)
	}
	finish := "stop"
	if len(p.tools) > 0 {
		finish = "tool_calls"
		var calls []any
		for i, tc := range p.tools {
			calls = append(calls, map[string]any{"index": i, "id": s.id("call"), "type": "function", "function": map[string]any{"name": tc.name, "arguments": tc.args}})
		}
		chunk(map[string]any{"tool_calls": calls}, nil, nil)
	}
	if p.shell != "" || p.write != nil {
		finish = "tool_calls"
		name := toolName(tools, "bash", "shell")
		args := map[string]any{"command": p.shell, "description": "Run a command"}
		if p.write != nil {
			name, args = toolName(tools, "write"), map[string]any{"filePath": p.write.path, "content": p.write.text + "\n"}
		}
		b, _ := json.Marshal(args)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": s.id("call"), "type": "function",
			"function": map[string]any{"name": name, "arguments": string(b)}}}}, nil, nil)
	}
	chunk(map[string]any{}, finish, map[string]any{"prompt_tokens": inTokens, "completion_tokens": outTokens, "total_tokens": inTokens + outTokens})
	e.raw("[DONE]")
}

// chatLocal answers in the streaming shape of local model servers: content
// null beside tool calls, each tool call's id and name in a chunk of its own
// and its arguments split over the following chunks (an accumulator must
// join them by index), the finish reason in a chunk without usage, and the
// usage in a last chunk with no choices.
func (s *Server) chatLocal(r *http.Request, e *sse, chunk func(delta map[string]any, finish any, usage any), p plan) {
	chunk(map[string]any{"role": "assistant", "content": nil}, nil, nil)
	for _, c := range p.think {
		if !wait(r, p.delay) {
			return
		}
		chunk(map[string]any{"content": nil, "reasoning_content": c}, nil, nil)
	}
	for _, c := range p.chunks {
		if !wait(r, p.delay) {
			return
		}
		chunk(map[string]any{"content": c}, nil, nil)
	}
	finish := "stop"
	for i, tc := range p.tools {
		finish = "tool_calls"
		chunk(map[string]any{"content": nil, "tool_calls": []any{map[string]any{"index": i, "id": s.id("call"), "type": "function",
			"function": map[string]any{"name": tc.name, "arguments": ""}}}}, nil, nil)
		for _, piece := range chunked(tc.args, 5) {
			chunk(map[string]any{"content": nil, "tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": piece}}}}, nil, nil)
		}
	}
	chunk(map[string]any{}, finish, nil)
	e.event("", map[string]any{"id": "local", "object": "chat.completion.chunk", "created": 0, "model": "local", "choices": []any{},
		"usage": map[string]any{"prompt_tokens": inTokens, "completion_tokens": outTokens, "total_tokens": inTokens + outTokens}})
	e.raw("[DONE]")
}
