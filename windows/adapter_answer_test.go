package windows

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// The test binary doubles as a fake powershell.exe on every system: with
// fakeAnswerEnv set it prints that answer and exits 0, as a PowerShell that
// never ran the script would (Wine's stub does exactly this).
const fakeAnswerEnv = "DEEPCODE_TEST_FAKE_POWERSHELL_ANSWER"

func TestMain(m *testing.M) {
	if ans, ok := os.LookupEnv(fakeAnswerEnv); ok {
		fmt.Print(ans)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// An adapter answer that is empty, not JSON, or does not confirm the action
// fails the action with a clear error instead of passing for success
// (`service install --at-login` printed "installed for login" on an empty
// answer).
func TestAdapterRefusesEmptyOrMalformedAnswers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	svc := t.TempDir()
	c, _ := NewConfig(sampleTask())
	if err := WriteConfig(svc, c); err != nil {
		t.Fatal(err)
	}
	a := &Adapter{PowerShell: exe, ServiceDir: svc}
	ctx := context.Background()
	actions := map[string]func() error{
		"register":   func() error { return a.Register(ctx) },
		"unregister": func() error { return a.Unregister(ctx) },
		"start":      func() error { return a.Start(ctx) },
		"stop":       func() error { return a.Stop(ctx) },
		"query":      func() error { _, err := a.Query(ctx); return err },
	}
	good := map[string]string{
		"register": `{"registered":true}`, "unregister": `{"removed":false}`, "start": `{"started":true}`,
		"stop": `{"stopped":true}`, "query": `{"installed":true,"state":"Ready"}`,
	}
	bad := []string{"", "  \r\n", "{", "null", "[]", `"ok"`, "{}", `{"registered":"yes"}`,
		`{"installed":null,"removed":null}`, "Register-ScheduledTask : access denied"}
	for action, run := range actions {
		t.Setenv(fakeAnswerEnv, good[action]+"\r\n")
		if err := run(); err != nil {
			t.Errorf("%s with the answer %q: %v", action, good[action], err)
		}
		answers := bad
		if action != "register" { // what install runs: every answer; the rest share the check
			answers = []string{"", "{}"}
		}
		if action != "unregister" && action != "query" {
			answers = append(answers, strings.Replace(good[action], "true", "false", 1))
		}
		for _, ans := range answers {
			t.Setenv(fakeAnswerEnv, ans)
			err := run()
			e, ok := errs.As(err)
			if !ok || e.Code != errs.StartFailed || !strings.Contains(e.Message, "no valid answer to "+action) {
				t.Errorf("%s with the answer %q: %v, want a START_FAILED saying there was no valid answer", action, ans, err)
			}
		}
	}
}
