package cli

import (
	"context"
	"io"
	"path/filepath"
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

// TestQuickStatusMatchesCobra: a plain service status is run without the
// command tree, with the same output and exit status as through it; any
// other command line that starts like one is left to cobra.
func TestQuickStatusMatchesCobra(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DEEPCODE_HOME", home)
	db := filepath.Join(t.TempDir(), "missing", "x.sqlite3")
	for _, args := range [][]string{
		{"service", "status"},
		{"service", "status", "--json"},
		{"service", "status", "--json=false"},
		{"service", "status", "--json=true", "--database", db},
		{"--database=" + db, "service", "status", "--json"},
		{"--database", db, "service", "status", "--json"},
	} {
		if _, ok := (&app{}).quickStatus(args); !ok {
			t.Errorf("%q is not taken as a plain status", args)
			continue
		}
		var quick, tree struct{ out, err captured }
		quickCode := run(args, &quick.out, &quick.err, TUIOptions{})
		a := &app{stdout: &tree.out, stderr: &tree.err, args: args}
		treeCode := a.runCommand(context.Background(), args)
		if quickCode != treeCode || quick.out.s != tree.out.s || quick.err.s != tree.err.s {
			t.Errorf("%q: quick exit %d stdout %q stderr %q; through the tree exit %d stdout %q stderr %q",
				args, quickCode, quick.out.s, quick.err.s, treeCode, tree.out.s, tree.err.s)
		}
		if quickCode != exitNotRunning {
			t.Errorf("%q: exit %d, want %d (nothing runs)", args, quickCode, exitNotRunning)
		}
	}
	for _, args := range [][]string{
		{"service"},
		{"service", "status", "--help"},
		{"service", "status", "-h"},
		{"service", "status", "extra"},
		{"service", "status", "--jsn"},
		{"service", "status", "--json=maybe"},
		{"service", "status", "--database"},
		{"service", "status", "--", "--json"},
		{"status", "service"},
		{"service", "start"},
		{"--databasex=y", "service", "status"},
		{"--json", "service", "status"}, // status's own flag, before status
		{"service", "--json", "status"},
	} {
		a := &app{}
		if _, ok := a.quickStatus(args); ok {
			t.Errorf("%q is taken as a plain status; cobra must answer it", args)
		}
		if a.database != "" || a.jsonOut {
			t.Errorf("%q: a refused quick status left flags set (database %q, json %v)", args, a.database, a.jsonOut)
		}
	}
}
