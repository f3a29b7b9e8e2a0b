package cli

import (
	"io"
	"slices"
	"testing"
)

// TestRootCommandForMakesOnlyTheSelectedSubtree: a run that names a top
// command gets that command's subtree alone, chosen as cobra chooses (a
// flag's value is never a command name); every other run gets the whole
// tree, so that help, completion and suggestions see every command.
func TestRootCommandForMakesOnlyTheSelectedSubtree(t *testing.T) {
	all := len((&app{}).topCommands())
	for _, tc := range []struct {
		args []string
		want []string // nil: the whole tree
	}{
		{args: []string{"service", "status", "--json"}, want: []string{"service"}},
		{args: []string{"--database", "exec", "service", "status"}, want: []string{"service"}},
		{args: []string{"--database=x.sqlite3", "threads", "ls"}, want: []string{"threads"}},
		{args: []string{"--profile", "exec", "agents", "ls"}, want: []string{"agents"}},
		{args: []string{"automation", "ls"}, want: []string{"automations"}},
		{args: []string{"exec", "--", "service"}, want: []string{"exec"}},
		{args: nil},
		{args: []string{}},
		{args: []string{"--version"}},
		{args: []string{"help", "service"}},
		{args: []string{"completion", "bash"}},
		{args: []string{"__complete", "serv"}},
		{args: []string{"servic", "status"}},
		{args: []string{"--profile", "service"}},
	} {
		root := (&app{stdout: io.Discard, stderr: io.Discard}).rootCommandFor(tc.args)
		var got []string
		for _, c := range root.Commands() {
			got = append(got, c.Name())
		}
		if tc.want == nil {
			if len(got) != all {
				t.Errorf("%q: commands %v, want all %d", tc.args, got, all)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: commands %v, want %v", tc.args, got, tc.want)
		}
	}
}

// TestRootCommandForRunsAsTheWholeTree: the same command line gives the
// same exit status and output through the selected subtree as through
// the whole one.
func TestRootCommandForRunsAsTheWholeTree(t *testing.T) {
	for _, args := range [][]string{
		{"service", "status", "--bogus"},
		{"service", "bogus"},
		{"version", "--json"},
		{"threads", "ls", "--help"},
	} {
		var partial, whole struct{ out, err captured }
		code := run(args, &partial.out, &partial.err, TUIOptions{})
		a := &app{stdout: &whole.out, stderr: &whole.err, args: args}
		root := a.rootCommand()
		root.SetArgs(args)
		root.SetOut(&whole.out)
		root.SetErr(&whole.err)
		_, err := root.ExecuteC()
		if (err == nil) != (code == exitOK) {
			t.Errorf("%q: exit %d through the subtree, error %v through the whole tree", args, code, err)
		}
		if partial.out.s != whole.out.s {
			t.Errorf("%q: stdout differs:\n%s\nwhole tree:\n%s", args, partial.out.s, whole.out.s)
		}
	}
}

type captured struct{ s string }

func (c *captured) Write(p []byte) (int, error) { c.s += string(p); return len(p), nil }
