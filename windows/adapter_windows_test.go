package windows

import (
	"context"
	"testing"

	"github.com/deepcode-dev/deepcode/shared/testkit/wine"
)

// The fixed adapter under the real Windows PowerShell and Task Scheduler:
// a query of a task that was never registered answers installed=false.
// It only reads, so it changes nothing on the machine that runs it.
func TestAdapterQueryWithWindowsPowerShell(t *testing.T) {
	wine.Skip(t, wine.NoPowerShell)
	svc := t.TempDir()
	task := sampleTask()
	task.DBID = "zz0test0none" // a task name no installation uses
	c, err := NewConfig(task)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteConfig(svc, c); err != nil {
		t.Fatal(err)
	}
	st, err := (&Adapter{ServiceDir: svc}).Query(context.Background())
	if err != nil {
		t.Fatalf("query through Windows PowerShell: %v", err)
	}
	if st.Installed || st.Running() {
		t.Fatalf("a task that was never registered: %+v", st)
	}
}
