package scheduler_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deepcode-dev/deepcode/services/scheduler"
	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/paths"
	"github.com/deepcode-dev/deepcode/shared/rpc"
	"github.com/deepcode-dev/deepcode/shared/store"
	"github.com/deepcode-dev/deepcode/shared/testkit"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) { testkit.Main(m) }

// startInstance starts a supervised instance (manager, gateway, scheduler,
// agentd on demand) in a fresh home.
func startInstance(t testing.TB, extraEnv ...string) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, testkit.Binaries(t))
	env.Extra = append(env.Extra, extraEnv...)
	env.MustRun("service", "start", "--port", "0")
	t.Cleanup(func() { env.Run("service", "stop", "--drain=false") })
	return env
}

type client struct {
	t    testing.TB
	peer *rpc.Peer
}

func dialPath(t testing.TB, sock, path string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, err := rpc.Dial(ctx, rpc.DialOptions{Network: "unix", Address: sock, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, peer: rpc.NewPeer(ws, rpc.PeerOptions{Handler: rpc.NewMux()})}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.peer.Run() }()
	t.Cleanup(func() { c.peer.Close(rpc.CloseNormal, "test over"); <-done })
	return c
}

// dial connects straight to the instance's scheduler.sock.
func dial(t testing.TB, env *testkit.Env) *client {
	return dialPath(t, env.Layout("").Socket(paths.SchedulerSocket), "/rpc")
}

// dialGateway connects as a native client through gateway.sock.
func dialGateway(t testing.TB, env *testkit.Env) *client {
	c := dialPath(t, env.Layout("").Socket(paths.GatewaySocket), "/api/rpc")
	c.must("initialize", api.InitializeParams{ProtocolVersion: "1.0", ClientInfo: api.ClientInfo{Name: "test", Version: "0"}}, nil)
	return c
}

func (c *client) call(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.peer.Call(ctx, method, params, result)
}

func (c *client) must(method string, params, result any) {
	c.t.Helper()
	if err := c.call(method, params, result); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
}

func (c *client) create(params map[string]any) scheduler.Automation {
	c.t.Helper()
	var res struct{ Automation scheduler.Automation }
	c.must(api.MethodAutomationCreate, params, &res)
	return res.Automation
}

func (c *client) pauseAll(ids ...string) {
	c.t.Helper()
	for _, id := range ids {
		c.must(api.MethodAutomationPause, map[string]any{"automationId": id}, nil)
	}
}

// db opens the instance's database for inspection.
func db(t testing.TB, env *testkit.Env) *sql.DB {
	t.Helper()
	d, err := store.Open(context.Background(), env.Layout("").Database)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d.SQL()
}

type runRow struct {
	id, status, trigger, messageID, turnID string
	scheduled                              time.Time
	missed                                 int
	missedFrom                             time.Time
	token                                  int64
}

func (r runRow) String() string {
	return fmt.Sprintf("%s %s %s missed=%d token=%d", r.scheduled.Format("15:04:05.000"), r.status, r.trigger, r.missed, r.token)
}

// runRows lists an automation's runs, oldest first.
func runRows(t testing.TB, q *sql.DB, automationID string) []runRow {
	t.Helper()
	rows, err := q.Query(`SELECT id, status, trigger, message_id, COALESCE(turn_id, ''), scheduled_at, missed_count, COALESCE(missed_from, 0), COALESCE(lease_token, 0)
		FROM automation_runs WHERE automation_id = ? ORDER BY scheduled_at, id`, automationID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var r runRow
		var at, from int64
		if err := rows.Scan(&r.id, &r.status, &r.trigger, &r.messageID, &r.turnID, &at, &r.missed, &from, &r.token); err != nil {
			t.Fatal(err)
		}
		r.scheduled, r.missedFrom = time.UnixMilli(at).UTC(), time.UnixMilli(from).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// turnsByKey counts agentd's turns per automation message id.
func turnsByKey(t testing.TB, q *sql.DB) map[string][]string {
	t.Helper()
	rows, err := q.Query(`SELECT message_id, id FROM turns WHERE message_id LIKE 'auto:%'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			t.Fatal(err)
		}
		out[k] = append(out[k], id)
	}
	return out
}

func countStatus(t testing.TB, q *sql.DB, status string) int {
	t.Helper()
	var n int
	if err := q.QueryRow(`SELECT count(*) FROM automation_runs WHERE status = ?`, status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// leader is the pid and fencing token of the current scheduler leader (0
// when nobody holds the lease).
func leader(t testing.TB, q *sql.DB) (pid int, token int64) {
	t.Helper()
	var holder string
	var exp int64
	err := q.QueryRow(`SELECT holder, token, expires_at FROM leases WHERE name = ?`, scheduler.LeaseName).Scan(&holder, &token, &exp)
	if err == sql.ErrNoRows || holder == "" || exp <= time.Now().UnixMilli() {
		return 0, token
	}
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(holder)
	if len(f) < 3 {
		t.Fatalf("lease holder %q", holder)
	}
	pid, _ = strconv.Atoi(f[2])
	return pid, token
}

// standby runs a second deepcode-scheduler --foreground on the instance's
// database with its own runtime directory (so it binds its own
// scheduler.sock and registers with no manager); it reaches the instance's
// agentd through a symbolic link to agentd.sock.
type standby struct {
	cmd    *exec.Cmd
	rt     string
	out    *lockedBuffer
	waited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startStandby(t testing.TB, env *testkit.Env, extraEnv ...string) *standby {
	t.Helper()
	rt, err := os.MkdirTemp("", "dcsb-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	l := env.Layout("")
	dir := filepath.Join(rt, l.DBID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.Socket(paths.AgentdSocket), filepath.Join(dir, paths.AgentdSocket)); err != nil {
		t.Fatal(err)
	}
	cmd := env.Command(context.Background(), "deepcode-scheduler", "--foreground", "--database", l.Database)
	cmd.Env = append(cmd.Env, paths.EnvRuntimeDir+"="+rt)
	cmd.Env = append(cmd.Env, extraEnv...)
	sb := &standby{cmd: cmd, rt: rt, out: &lockedBuffer{}, waited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = sb.out, sb.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(sb.waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-sb.waited
		_ = os.RemoveAll(rt)
		if t.Failed() {
			t.Logf("standby scheduler output:\n%s", sb.out.String())
		}
	})
	testkit.WaitFor(t, 30*time.Second, "the standby's socket", func() bool {
		_, err := os.Stat(filepath.Join(dir, paths.SchedulerSocket))
		return err == nil
	})
	return sb
}

func (sb *standby) pid() int { return sb.cmd.Process.Pid }

// dial connects to the standby's own scheduler.sock.
func (sb *standby) dial(t testing.TB, env *testkit.Env) *client {
	return dialPath(t, filepath.Join(sb.rt, env.Layout("").DBID, paths.SchedulerSocket), "/rpc")
}

func kill(t testing.TB, pid int) {
	t.Helper()
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

// waitSettled waits until no run is claimed any more (every claim submitted
// or failed).
func waitSettled(t testing.TB, q *sql.DB) {
	t.Helper()
	testkit.WaitFor(t, 90*time.Second, "every claimed run to be settled", func() bool { return countStatus(t, q, scheduler.StatusClaimed) == 0 })
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
