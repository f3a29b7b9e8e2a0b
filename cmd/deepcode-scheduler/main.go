// Command deepcode-scheduler fires automations: cron schedules that submit
// a prompt to agentd exactly once per occurrence, led by one process per
// database through a lease.
package main

import (
	"github.com/deepcode-dev/deepcode/services/scheduler"
	"github.com/deepcode-dev/deepcode/shared/service"
)

func main() { service.Main(scheduler.Spec()) }
