// Package chaos is deepcode's chaos suite (chaos_test.go): the real
// binaries under a mixed workload, through the project's own client
// (shared/client) over the gateway's socket — four clients doing keyed
// turn/enqueue and turn/steer, a client answering approvals, a terminal
// streaming numbered lines, an automation firing every three seconds and a
// keyed manual run of it per trial, and a turn longer than the runtime
// lease's TTL started before every fault — while a driver injects one fault
// per trial at a random instant:
//
//	kill-supervisor   SIGKILL deepcode-supervisor, then `deepcode service start`
//	kill-manager      SIGKILL the service; the supervisor restarts it
//	kill-gateway      (likewise)
//	kill-scheduler    (likewise)
//	kill-agentd       (likewise, on the next connection)
//	kill-termhost     (likewise)
//	term-agentd       SIGTERM agentd: its graceful stop
//
// After each trial it pauses the clients and checks, on the database opened
// read-only, the side-effect files and a freshly connected client: every
// accepted mutation is in the database; a resend of its key returns the
// original with duplicate:true; no key has two turns; no turn started or
// ended twice; the event log (in the database and through event/replay) has
// no gap; no automation occurrence fired twice; no turn a client read as
// ended changed, and none that ran to its last step during a graceful stop
// is recorded crashed; a task's side effect happened at most once; the
// instance answered a write within 3 s of its restart (the `service start`
// answer, or the new process's start) and status did not say ready while it
// refused writes with LEASE_HELD; PRAGMA integrity_check is ok; no process
// panicked or raced. At the end it lets every turn end, stops the instance
// and requires that no process of it is left. It prints each trial, the
// violations with their evidence, `N passed, M failed`, and the p50 and
// worst recovery times.
//
// Settings (environment, or the -chaos.* test flags):
//
//	DEEPCODE_CHAOS_TRIALS  trials (default 5: the short form `make test` runs)
//	DEEPCODE_CHAOS_KINDS   comma-separated kinds, or "all" (default: the
//	                       short form's, shortKinds in chaos_test.go:
//	                       every kind)
//	DEEPCODE_CHAOS_SEED    replays a run's choices of kinds and instants
//
//	make chaos                                    # 40 trials of every kind
//	make chaos CHAOS_TRIALS=10 CHAOS_KINDS=term-agentd CHAOS_FLAGS=-race
//	go test -count=1 -v -run TestChaos ./shared/testkit/chaos
//
// The package has no code outside its tests.
package chaos
