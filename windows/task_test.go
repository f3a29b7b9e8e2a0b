package windows

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./windows -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s differs from the generated file:\n%s", path, got)
	}
}

const sid = "S-1-5-21-3623811015-3361044348-30300820-1013"

func sampleTask() *Task {
	return &Task{
		DBID:       "k7q2m4x9a1b3",
		UserSID:    sid,
		Supervisor: `C:\Program Files\deepcode\libexec\deepcode-supervisor.exe`,
		Database:   `C:\Users\ada\.deepcode\state\deepcode.sqlite3`,
		Port:       3081,
		Home:       `C:\Users\ada\.deepcode`,
		Path:       `C:\Windows\system32;C:\Windows;C:\Program Files\Git\cmd`,
	}
}

func TestTaskXMLGolden(t *testing.T) {
	x, err := sampleTask().XML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "task.xml", x)
	for _, want := range []string{
		"<LogonType>InteractiveToken</LogonType>",
		"<MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>",
		"<ExecutionTimeLimit>PT0S</ExecutionTimeLimit>",
		"<Command>C:\\Program Files\\deepcode\\libexec\\deepcode-supervisor.exe</Command>",
		"<Arguments>--database C:\\Users\\ada\\.deepcode\\state\\deepcode.sqlite3 --port 3081</Arguments>",
	} {
		if !strings.Contains(string(x), want) {
			t.Errorf("task definition lacks %s", want)
		}
	}
}

func TestTaskXMLGoldenAwkwardPaths(t *testing.T) {
	task := &Task{
		DBID:       "zz9plural9za",
		UserSID:    sid,
		Supervisor: `D:\Tools & Co\<deep> code\deepcode-supervisor.exe`,
		Database:   `C:\Users\José Ñandú\R&D 'x' 日本語\my db.sqlite3`,
		Home:       `C:\Users\José Ñandú\dc home\`,
	}
	x, err := task.XML()
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "task-awkward.xml", x)
	if strings.Contains(string(x), "R&D") || strings.Contains(string(x), "<deep>") {
		t.Fatal("XML special characters written unescaped")
	}
}

func TestTaskRejects(t *testing.T) {
	cases := map[string]func(*Task){
		"percent in database":  func(t *Task) { t.Database = `C:\Users\a\%USERPROFILE%\db.sqlite3` },
		"percent in home":      func(t *Task) { t.Home = `C:\100%\home` },
		"relative supervisor":  func(t *Task) { t.Supervisor = `deepcode-supervisor.exe` },
		"not a SID":            func(t *Task) { t.UserSID = "Everyone" },
		"SID with SDDL":        func(t *Task) { t.UserSID = sid + ")(A;;GA;;;WD" },
		"bad db id":            func(t *Task) { t.DBID = `..\x` },
		"quote in path":        func(t *Task) { t.Database = `C:\a"b\db` },
		"port out of range":    func(t *Task) { t.Port = 70000 },
		"posix path on a task": func(t *Task) { t.Database = "/home/ada/db.sqlite3" },
	}
	for name, mutate := range cases {
		task := sampleTask()
		mutate(task)
		if _, err := task.XML(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	unc := sampleTask()
	unc.Database = `\\server\share\db.sqlite3`
	if _, err := unc.XML(); err != nil {
		t.Errorf("UNC database: %v", err)
	}
}

// splitCommandLine is CommandLineToArgvW's parsing (post-2008 rules), to
// check that CommandLine round-trips.
func splitCommandLine(s string) []string {
	var args []string
	var cur strings.Builder
	inArg, inQuote := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			n := 0
			for i < len(s) && s[i] == '\\' {
				n++
				i++
			}
			if i < len(s) && s[i] == '"' {
				cur.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					cur.WriteByte('"')
				} else {
					inQuote = !inQuote
				}
			} else {
				cur.WriteString(strings.Repeat(`\`, n))
				i--
			}
			inArg = true
		case c == '"':
			if inQuote && i+1 < len(s) && s[i+1] == '"' {
				cur.WriteByte('"')
				i++
			} else {
				inQuote = !inQuote
			}
			inArg = true
		case (c == ' ' || c == '\t') && !inQuote:
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args
}

func TestCommandLineRoundTrips(t *testing.T) {
	cases := [][]string{
		{"--database", `C:\plain\db.sqlite3`},
		{"--database", `C:\with space\db.sqlite3`},
		{"--database", `C:\trailing\ `},
		{"--database", `C:\dir with space\`},
		{"--database", `\\server\share\a b\`},
		{"", `a"b`, `a\"b`, `a\\"b c`, "tab\there", `ends\\`},
		{"--database", `C:\Users\José Ñandú\R&D 日本語\db`},
	}
	for _, args := range cases {
		line := CommandLine(args)
		if got := splitCommandLine(line); !reflect.DeepEqual(got, args) {
			t.Errorf("CommandLine(%q) = %s, parsed back as %q", args, line, got)
		}
	}
	if got := CommandLine([]string{"--database", `C:\dir with space\`}); got != `--database "C:\dir with space\\"` {
		t.Errorf("trailing backslash in quotes: %s", got)
	}
}
