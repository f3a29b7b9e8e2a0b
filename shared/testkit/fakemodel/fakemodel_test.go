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
