package main

import (
	"fmt"
	"os"

	"trellis/launch"
	"trellis/train"
)

// choosePlan replaces parallel.plan = "auto" by the planner's choice
// (train.Job.ChoosePlan) and says why on stderr. Under a launcher the
// device count is the launcher's world size.
func choosePlan(j *train.Job, env *launch.Env) error {
	if env != nil && j.Parallel.Backend != "local" {
		j.Parallel.Devices = env.WorldSize
	}
	ch, err := j.ChoosePlan()
	if err != nil {
		return err
	}
	j.Parallel.Plan, j.Parallel.Devices = ch.Plan, ch.Devices
	for _, w := range ch.Why {
		fmt.Fprintln(os.Stderr, "parallel.plan=auto: "+w)
	}
	return nil
}
