// Package chaos is deepcode's chaos suite (see chaos_test.go): real
// binaries under a mixed workload (keyed turn/enqueue and turn/steer from
// four clients, approvals, a streaming terminal, an automation firing every
// three seconds) while a driver SIGKILLs a random process of the instance
// (the supervisor included) or SIGTERMs agentd at a random instant, trial
// after trial. After each trial and at the end it checks what the service
// promises (nothing accepted is lost, nothing runs twice, nothing completed
// is recorded as crashed, the event log has no gaps, the instance answers a
// write within 3 s of its restart, the database is intact) and reports every
// violation with its evidence.
//
//	make chaos                                   # 40 trials, every kind of kill
//	go test ./shared/testkit/chaos               # the short form: 5 trials
//	DEEPCODE_CHAOS_TRIALS=10 DEEPCODE_CHAOS_KINDS=kill-agentd,term-agentd \
//	DEEPCODE_CHAOS_SEED=7 go test -v -count=1 ./shared/testkit/chaos
//
// The package has no code outside its tests.
package chaos
