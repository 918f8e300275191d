package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"trellis/checkpoint"
	"trellis/config"
	"trellis/data"
	"trellis/launch"
	"trellis/train"
)

// unset marks a job field the user has not set, so that its default can
// depend on the rest of the job.
const unset = "\x00unset"

// jobSpec is the resolved job and what the command needs to know about how
// it was put together.
type jobSpec struct {
	job        train.Job
	resumeStep int      // the checkpoint's step (-1: a fresh run)
	notes      []string // defaults chosen from the context, for the log
}

// assembleJob builds the job: the embedded defaults (or, with --resume,
// the checkpoint's job), then --config, then each --set and the shorthand
// flags. Defaults that depend on the context:
//
//   - a resumed run writes its checkpoints next to the checkpoint it was
//     given (the checkpoint's own checkpoint.dir may be another run's), and
//     picks its backend afresh;
//   - parallel.plan, when nobody set it: under a launcher of W processes
//     (or with --devices W) dp=W,zero=3, else auto (the planner's choice;
//     for the default model and micro-batch on the demonstration's 4
//     devices);
//   - under an elastic launcher (TRELLIS_ELASTIC=1) whose world differs
//     from the plan's (the checkpoint's, or one given): the plan's
//     data-parallel degree re-derived for the world (train.Job.FitWorld);
//   - checkpoint.dir, when nobody set it: runs/trellis, or runs/trellis-N
//     when that holds another run's checkpoints (freeRunDir);
//   - parallel.device_memory, when nobody set it: the demonstration's
//     48 MiB only for the default model and micro-batch under the default
//     plan or one the user chose (the budget is about that model's state
//     on 4 devices, or its failing on fewer), no budget otherwise.
func assembleJob(f trainFlags, sets []string, env *launch.Env) (jobSpec, error) {
	def := train.DefaultJob()
	spec := jobSpec{job: def, resumeStep: -1}
	if f.resume != "" {
		m, err := train.LoadMeta(f.resume)
		if err != nil {
			return spec, err
		}
		spec.job, spec.resumeStep = m.Job, m.Step
		spec.job.Checkpoint.Dir = resumeRoot(f.resume)
		spec.job.Parallel.Backend = def.Parallel.Backend
	} else {
		spec.job.Parallel.Plan, spec.job.Parallel.DeviceMemory, spec.job.Checkpoint.Dir = unset, unset, unset
	}
	if err := config.Load(&spec.job, f.config, sets); err != nil {
		return spec, err
	}
	j := &spec.job
	if j.Parallel.Devices < 0 {
		return spec, fmt.Errorf("parallel.devices=%d must be >= 1 (0: as many as the plan needs)", j.Parallel.Devices)
	}
	autoPlan := false // a plan other than the default, chosen here
	if j.Parallel.Plan == unset {
		autoPlan = env != nil && j.Parallel.Backend != "local" || j.Parallel.Devices > 0
		switch {
		case env != nil && j.Parallel.Backend != "local":
			j.Parallel.Plan = fmt.Sprintf("dp=%d,zero=3", env.WorldSize)
			spec.notes = append(spec.notes, fmt.Sprintf("parallel.plan=%s: one data-parallel rank per process of the launcher (pin a plan with --parallel)", j.Parallel.Plan))
		case j.Parallel.Devices > 0:
			j.Parallel.Plan = fmt.Sprintf("dp=%d,zero=3", j.Parallel.Devices)
		default:
			// The planner chooses (--parallel auto); the demonstration
			// is "this model on 4 devices of 48 MiB", where it picks
			// ZeRO-3 over the 4 (dp=1 does not fit).
			j.Parallel.Plan = train.Auto
			if j.Model == def.Model && j.Train.MicroBatch == def.Train.MicroBatch {
				j.Parallel.Devices = 4
				spec.notes = append(spec.notes, "parallel.plan=auto on parallel.devices=4: the demonstration's 4 devices of 48 MiB; the planner chooses the plan (pin one with --parallel)")
			} else {
				autoPlan = true
				spec.notes = append(spec.notes, "parallel.plan=auto: the planner chooses the plan and the device count (pin them with --parallel and --devices)")
			}
		}
	}
	if env != nil && env.Elastic && j.Parallel.Backend != "local" && j.Parallel.Plan != train.Auto {
		note, err := j.FitWorld(env.WorldSize)
		if err != nil {
			return spec, err
		}
		if note != "" {
			spec.notes = append(spec.notes, note)
		}
	}
	if j.Parallel.DeviceMemory == unset {
		j.Parallel.DeviceMemory = ""
		if j.Model == def.Model && j.Train.MicroBatch == def.Train.MicroBatch && !autoPlan {
			j.Parallel.DeviceMemory = def.Parallel.DeviceMemory
		}
	}
	if j.Checkpoint.Dir == unset {
		dir, err := freeRunDir(def.Checkpoint.Dir)
		if err != nil {
			return spec, err
		}
		if j.Checkpoint.Dir = dir; dir != def.Checkpoint.Dir {
			spec.notes = append(spec.notes, fmt.Sprintf("checkpoint.dir=%s: %s holds another run's checkpoints, or another run is writing there (set checkpoint.dir to choose)", dir, def.Checkpoint.Dir))
		}
	}
	if f.resume == "" && j.Train.Prompt == def.Train.Prompt && j.Data.Source != def.Data.Source {
		j.Train.Prompt = promptFrom(j.Data.Source)
	}
	return spec, nil
}

// freeRunDir gives a fresh run that did not choose a checkpoint directory
// its own: base if it holds no checkpoints and no run is writing there
// (checkpoint.Busy), else the first free base-2,
// base-3, ... (a directory chosen explicitly is never changed: a run
// refuses one that holds another run's checkpoints).
func freeRunDir(base string) (string, error) {
	for i := 1; i <= 1000; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		if _, busy := checkpoint.Busy(dir); busy {
			continue // another run is writing there
		}
		steps, err := checkpoint.Steps(dir)
		if err != nil || len(steps) == 0 {
			return dir, nil // an unreadable one is reported by the run's checks
		}
	}
	return "", fmt.Errorf("checkpoint.dir: %s-2 ... %s-1000 all hold checkpoints: set checkpoint.dir", base, base)
}

// resumeRoot is the checkpoint root of a --resume argument: the parent of
// a step directory, or the root itself.
func resumeRoot(path string) string {
	if _, err := os.Stat(filepath.Join(path, checkpoint.IndexName)); err == nil {
		return filepath.Dir(filepath.Clean(path))
	}
	return filepath.Clean(path)
}

// promptFrom is the samples' default prompt for a user's data: the start of
// a text file (its first line, at most 40 bytes, cut at a word), or nothing
// for token files and synthetic data.
func promptFrom(source string) string {
	if source == data.SourceSynthetic || strings.EqualFold(filepath.Ext(source), ".bin") {
		return ""
	}
	f, err := os.Open(source)
	if err != nil {
		return "" // the data checks report it
	}
	defer f.Close()
	buf := make([]byte, 64)
	n, _ := f.Read(buf)
	s := strings.TrimLeft(string(buf[:n]), " \t\r\n\ufeff")
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 40 {
		s = s[:40]
		if i := strings.LastIndexByte(s, ' '); i > 0 {
			s = s[:i]
		}
	}
	for !utf8.ValidString(s) && len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s
}

// checkLauncher refuses, before any rank starts, a job that does not fit
// the launcher it runs under: a local backend in every process (each would
// run the whole job, racing on its checkpoints and metrics), or a plan
// whose world size differs from the launcher's.
func checkLauncher(j train.Job, env *launch.Env) error {
	if env == nil {
		return nil
	}
	if j.Parallel.Backend == "local" {
		if env.WorldSize > 1 {
			return fmt.Errorf("parallel.backend=local under a launcher of %d processes (%s): every process would run the whole job and write the same checkpoints; use --backend auto (the default) or tcp", env.WorldSize, env.Source)
		}
		return nil
	}
	p, err := j.EnginePlan()
	if err != nil {
		return err
	}
	if p.Devices() != env.WorldSize {
		return fmt.Errorf("parallel.plan %s needs %d ranks, but the launcher (%s) started %d processes: start %d, or pin a plan for %d (e.g. --parallel dp=%d,zero=3)",
			p.Short(), p.Devices(), env.Source, env.WorldSize, p.Devices(), env.WorldSize, env.WorldSize)
	}
	return nil
}
