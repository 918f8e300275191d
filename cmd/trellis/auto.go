package main

import (
	"fmt"
	"os"
	"path/filepath"

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

// cachedProfilePath is where `trellis profile --cache` keeps this
// machine's cluster file: trellis/host.toml under the user cache
// directory.
func cachedProfilePath() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "trellis", "host.toml"), nil
}

// useCachedProfile points a job that names no cluster file at the cached
// profile, when there is one, and says so (the run says which cluster its
// predictions use either way).
func useCachedProfile(j *train.Job) {
	if j.Parallel.Cluster != "" {
		return
	}
	p, err := cachedProfilePath()
	if err != nil {
		return
	}
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		j.Parallel.Cluster = p
	}
}
