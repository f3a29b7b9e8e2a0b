package fakemodel

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestPlanFor(t *testing.T) {
	steps := parse("say first\nwrite /w/a.txt some text\nshell echo hi\nsay last")
	p := planFor(steps, 0)
	if strings.Join(p.chunks, "") != "first" || p.write == nil || *p.write != (fileWrite{"/w/a.txt", "some text"}) || p.shell != "" {
		t.Fatalf("before any tool result: %+v", p)
	}
	p = planFor(steps, 1)
	if len(p.chunks) != 0 || p.write != nil || p.shell != "echo hi" {
		t.Fatalf("after the write's result: %+v", p)
	}
	p = planFor(steps, 2)
	if strings.Join(p.chunks, "") != "last" || p.call() {
		t.Fatalf("after both results: %+v", p)
	}
	if p := planFor(parse("no steps here"), 0); strings.Join(p.chunks, "") != "ok" {
		t.Fatalf("a prompt with no step: %+v", p)
	}
	if p := planFor(parse("status 429 slow down"), 0); p.status != 429 || p.msg != "slow down" {
		t.Fatalf("status: %+v", p)
	}
}

// toolCall posts body to path and returns the tool call the streamed
// answer ends with: the tool's name and its input (the arguments' JSON,
// or a freeform tool's text).
func toolCall(t *testing.T, s *Server, path, body string) (name, input string) {
	t.Helper()
	resp, err := http.Post(s.URL+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %v %s", path, resp.StatusCode, err, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type, Name, Arguments, Input string
			} `json:"item"`
			ContentBlock struct{ Type, Name string } `json:"content_block"`
			Delta        struct {
				PartialJSON string `json:"partial_json"`
			} `json:"delta"`
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("%s: %v in %s", path, err, data)
		}
		switch {
		case ev.Type == "response.output_item.done" && ev.Item.Type != "message":
			name, input = ev.Item.Name, ev.Item.Arguments+ev.Item.Input
		case ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use":
			name = ev.ContentBlock.Name
		case ev.Type == "content_block_delta":
			input += ev.Delta.PartialJSON
		case len(ev.Choices) > 0 && len(ev.Choices[0].Delta.ToolCalls) > 0:
			f := ev.Choices[0].Delta.ToolCalls[0].Function
			name, input = f.Name, f.Arguments
		}
	}
	return name, input
}

// TestWriteToolCalls checks the file-writing tool call of each API in the
// shape each runtime's own tool takes.
func TestWriteToolCalls(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt, _ := json.Marshal("write /w/a.txt hello there")
	patch := "*** Begin Patch\n*** Add File: /w/a.txt\n+hello there\n*** End Patch\n"
	args := func(v map[string]any) string { b, _ := json.Marshal(v); return string(b) }
	for _, c := range []struct {
		name, path, body string
		tool, input      string
	}{
		{"codex without apply_patch", "/v1/responses",
			`{"model":"m","input":[{"type":"message","role":"user","content":` + string(prompt) + `}],"tools":[{"type":"function","name":"exec_command"}]}`,
			"exec_command", args(map[string]any{"cmd": "apply_patch <<'EOF'\n" + patch + "EOF\n"})},
		{"codex function apply_patch", "/v1/responses",
			`{"model":"m","input":[{"type":"message","role":"user","content":` + string(prompt) + `}],"tools":[{"type":"function","name":"apply_patch"}]}`,
			"apply_patch", args(map[string]any{"input": patch})},
		{"codex freeform apply_patch", "/v1/responses",
			`{"model":"m","input":[{"type":"message","role":"user","content":` + string(prompt) + `}],"tools":[{"type":"custom","name":"apply_patch"}]}`,
			"apply_patch", patch},
		{"claude", "/v1/messages",
			`{"model":"m","messages":[{"role":"user","content":` + string(prompt) + `}],"tools":[{"name":"Bash"},{"name":"Write"}]}`,
			"Write", args(map[string]any{"file_path": "/w/a.txt", "content": "hello there\n"})},
		{"opencode", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":` + string(prompt) + `}],"tools":[{"function":{"name":"bash"}},{"function":{"name":"write"}}]}`,
			"write", args(map[string]any{"filePath": "/w/a.txt", "content": "hello there\n"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			name, input := toolCall(t, s, c.path, c.body)
			if name != c.tool || input != c.input {
				t.Errorf("tool call %s %q, want %s %q", name, input, c.tool, c.input)
			}
		})
	}
}

func TestPlanForToolGroupsAndFlaky(t *testing.T) {
	steps := parse("think hmm\nsay looking\ntool read_file {\"path\":\"a\"}\ntool list {}\nsay between\ntool grep {\"pattern\":\"x\"}\nflaky 429 2 1\nsay end")
	p := planFor(steps, 0)
	if strings.Join(p.think, "") != "hmm" || strings.Join(p.chunks, "") != "looking" || len(p.tools) != 2 ||
		p.tools[0] != (scriptedCall{"read_file", `{"path":"a"}`}) || p.tools[1] != (scriptedCall{"list", "{}"}) {
		t.Fatalf("first answer: %+v", p)
	}
	p = planFor(steps, 2)
	if strings.Join(p.chunks, "") != "between" || len(p.tools) != 1 || p.tools[0].name != "grep" {
		t.Fatalf("after the parallel calls' results: %+v", p)
	}
	p = planFor(steps, 3)
	if p.status != 429 || p.flakyN != 2 || p.retryAfter != "1" || strings.Join(p.chunks, "") != "end" {
		t.Fatalf("flaky: %+v", p)
	}
	s := &Server{}
	for i, want := range []bool{true, true, false, false} {
		if got := s.failNow(p, "prompt"); got != want {
			t.Fatalf("request %d: failNow = %v, want %v", i, got, want)
		}
	}
	if !s.failNow(p, "another prompt") {
		t.Fatal("a flaky step's errors are counted per prompt")
	}
}

// TestLocalChatShape: with split, tool call arguments arrive in pieces
// keyed by index, and usage in a chunk without choices.
func TestLocalChatShape(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt, _ := json.Marshal("split\ntool read_file {\"path\":\"notes.txt\"}\ntool list {\"path\":\".\"}")
	resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", bytes.NewBufferString(`{"model":"m","messages":[{"role":"user","content":`+string(prompt)+`}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	args := map[int]string{}
	names := map[int]string{}
	pieces, usageAlone := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Index    int `json:"index"`
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil && len(c.Choices) == 0 {
			usageAlone = true
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				names[tc.Index] += tc.Function.Name
				args[tc.Index] += tc.Function.Arguments
				if tc.Function.Arguments != "" {
					pieces++
				}
			}
		}
	}
	if names[0] != "read_file" || args[0] != `{"path":"notes.txt"}` || names[1] != "list" || args[1] != `{"path":"."}` || pieces < 4 || !usageAlone {
		t.Fatalf("names %v args %v pieces %d usage alone %v:\n%s", names, args, pieces, usageAlone, b)
	}
}
