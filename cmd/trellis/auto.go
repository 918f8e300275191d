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
	if env != nil && j.Parallel.Backend != "local" && env.WorldSize > 1 {
		return fmt.Errorf("parallel.plan=auto under a launcher of %d processes (%s): each process would choose on its own measurements; pin the plan (trellis train --parallel auto --devices %d --dry-run shows the planner's)", env.WorldSize, env.Source, env.WorldSize)
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
