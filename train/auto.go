package train

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"

	"trellis/device"
	"trellis/plan"
)

// Auto is the plan text that hands the choice to the planner
// (parallel.plan = "auto", --parallel auto).
const Auto = "auto"

// AutoChoice is what the planner chose for a job and why.
type AutoChoice struct {
	Plan    string   // for parallel.plan
	Devices int      // for parallel.devices
	Why     []string // the choice, the runner-up and, for a budget, whether one device fits
}

// engineFix pins what auto does not vary: fp32, no recomputation, the
// job's micro-batch. What the engine does not run (cp, fp8, experts, …)
// is not pinned here: the search on the engine's cluster (engine_stash)
// drops every plan plan.EngineRefusals refuses, so a mechanism the
// engine learns is searched at once.
func (j Job) engineFix() (plan.Fix, error) {
	return plan.ParseFix(fmt.Sprintf("precision=fp32,recompute=none,mbs=%d", j.Train.MicroBatch))
}

// autoDevices are the device counts the planner may use: parallel.devices
// when set, else the powers of two up to this process's CPUs (at least 8
// with a budget: a job too large for one device needs several).
func (j Job) autoDevices() []int {
	if d := j.Parallel.Devices; d > 0 {
		return []int{d}
	}
	top := runtime.GOMAXPROCS(0)
	if j.Parallel.DeviceMemory != "" && j.Parallel.DeviceMemory != "0" {
		top = max(top, 8)
	}
	ds := []int{1}
	for d := 2; d <= top; d *= 2 {
		ds = append(ds, d)
	}
	return ds
}

// withPlan is j running plan text pt on d devices.
func (j Job) withPlan(pt string, d int) Job {
	c := j
	c.Parallel.Plan, c.Parallel.Devices = pt, d
	return c
}

// autoSettings are the settings a run of j on d devices would have, for
// the planner (resolve's, with a placeholder fp32 plan, at the stated
// peak: runPeak).
func (j Job) autoSettings(d int) (settings, error) {
	s, err := j.withPlan(fmt.Sprintf("dp=%d", d), d).resolveShape()
	if err != nil {
		return s, err
	}
	s.enginePlan.Precision = plan.FP32
	s.peak, s.peakSrc, err = j.runPeak(s)
	return s, err
}

// resolveShape is resolve without the checks of the batch and the
// machine's memory, which depend on the plan.
func (j Job) resolveShape() (settings, error) {
	var s settings
	var err error
	if s.budget, err = parseSize("parallel.device_memory", j.Parallel.DeviceMemory); err != nil {
		return s, err
	}
	if s.bucket, err = parseSize("parallel.bucket_size", j.Parallel.BucketSize); err != nil {
		return s, err
	}
	s.ranks = max(1, j.Parallel.Devices)
	s.threads = j.Train.Threads
	if s.threads == 0 {
		s.threads = max(1, runtime.GOMAXPROCS(0)/s.ranks)
	}
	if s.linkLat, err = parseDuration("parallel.link_latency", j.Parallel.LinkLatency, 0); err != nil {
		return s, err
	}
	bw, err := parseSize("parallel.link_bandwidth", j.Parallel.LinkBandwidth)
	s.linkBW = float64(bw)
	return s, err
}

// ChoosePlan runs the planner's search over the plans the engine runs
// (dp, ZeRO 0-3, tp and sp, the pipeline schedules, flash; fp32, no
// recomputation) on every device count autoDevices allows, with the
// engine's memory model and the job's budget, and returns the fastest
// predicted plan the engine accepts.
func (j Job) ChoosePlan() (AutoChoice, error) {
	for _, err := range []error{j.Model.Validate(), j.Train.Validate(), j.Data.Validate(), j.checkVocab(), j.Checkpoint.Validate()} {
		if err != nil {
			return AutoChoice{}, err
		}
	}
	if t := j.Train; t.GlobalBatch%t.MicroBatch != 0 {
		return AutoChoice{}, fmt.Errorf("parallel.plan=auto: train.global_batch=%d is not a multiple of train.micro_batch=%d: every plan needs global_batch = dp × micro_batch × micro-batches per step (try train.global_batch=%d or train.micro_batch=1)",
			t.GlobalBatch, t.MicroBatch, (t.GlobalBatch/t.MicroBatch+1)*t.MicroBatch)
	}
	all, src, refused, err := j.autoCandidates()
	if err != nil {
		return AutoChoice{}, err
	}
	if len(all) == 0 {
		rejected, serr := j.autoRejections()
		if serr != nil {
			return AutoChoice{}, fmt.Errorf("parallel.plan=auto: %w", serr)
		}
		return AutoChoice{}, j.noAutoPlan(refused, rejected)
	}
	best := all[0]
	ch := AutoChoice{Plan: j.engineShort(best.e.Plan), Devices: best.d}
	ch.Why = append(ch.Why, fmt.Sprintf("chose %s on %d device(s): predicted step %.4gs, peak %s per device (%s)",
		ch.Plan, best.d, best.e.Time.Step, device.FormatBytes(best.e.Memory.Total), src))
	if len(all) > 1 {
		r := all[1]
		ch.Why = append(ch.Why, fmt.Sprintf("runner-up %s on %d device(s): predicted step %.4gs (%+.1f%%), peak %s",
			j.engineShort(r.e.Plan), r.d, r.e.Time.Step, 100*(r.e.Time.Step/best.e.Time.Step-1), device.FormatBytes(r.e.Memory.Total)))
	}
	if s, err := j.autoSettings(1); err == nil && s.budget > 0 && best.d > 1 {
		c, _, _ := j.jobCluster(s)
		p1, err := j.withPlan("dp=1", 1).EnginePlan()
		if err == nil {
			s.enginePlan = p1
			if pr, err := j.predictMemory(s, c); err == nil && pr[0].PeakAll > s.budget {
				ch.Why = append(ch.Why, fmt.Sprintf("dp=1 does not fit: one device would need %s, over the %s budget",
					device.FormatBytes(pr[0].PeakAll), device.FormatBytes(s.budget)))
			}
		}
	}
	return ch, nil
}

// autoCand is a plan the planner predicts and the engine runs, on d
// devices; txt is the planner's text of it.
type autoCand struct {
	e   plan.Estimate
	txt string
	d   int
}

// autoCandidates is every plan of the planner's search (its best 64 per
// device count) that fits and that the engine accepts, fastest predicted
// first (fewer devices first among equals); src names the cluster and
// refused is the engine's reason for refusing the first plan it refused.
func (j Job) autoCandidates() (all []autoCand, src string, refused error, err error) {
	fix, err := j.engineFix()
	if err != nil {
		return nil, "", nil, err
	}
	for _, d := range j.autoDevices() {
		s, err := j.autoSettings(d)
		if err != nil {
			return nil, "", nil, err
		}
		c, from, err := j.jobCluster(s)
		if err != nil {
			return nil, "", nil, err
		}
		src = from
		res, err := j.planJob(s, c, 0, 0).Search(plan.Options{Fix: fix, Top: 64})
		if err != nil {
			continue
		}
		for _, e := range res.Plans {
			txt := e.Plan.String()
			if _, err := j.withPlan(txt, d).resolve(); err == nil {
				all = append(all, autoCand{e, txt, d})
			} else if refused == nil {
				refused = err
			}
		}
	}
	slices.SortStableFunc(all, func(a, b autoCand) int {
		switch {
		case a.e.Time.Step < b.e.Time.Step:
			return -1
		case a.e.Time.Step > b.e.Time.Step:
			return 1
		}
		return a.d - b.d
	})
	return all, src, refused, nil
}

// autoRejections are the planner's rules and the candidates each cut, over
// autoCandidates' searches (for noAutoPlan), or the first search's error.
func (j Job) autoRejections() (map[string]int, error) {
	rejected := map[string]int{}
	fix, err := j.engineFix()
	if err != nil {
		return nil, err
	}
	for _, d := range j.autoDevices() {
		s, err := j.autoSettings(d)
		if err != nil {
			continue
		}
		c, _, err := j.jobCluster(s)
		if err != nil {
			continue
		}
		res, err := j.planJob(s, c, 0, 0).Search(plan.Options{Fix: fix, Top: 1})
		if err != nil {
			return nil, err
		}
		for k, n := range res.Rejected {
			rejected[k] += n
		}
	}
	return rejected, nil
}

// noAutoPlan says why --parallel auto found no plan: the budget only when
// one is set and it is what cut candidates, else the rules the planner cut
// them by (the job's shape against the device counts) or the engine's
// reason for refusing the planner's best.
func (j Job) noAutoPlan(refused error, rejected map[string]int) error {
	devs := j.autoDevices()
	budget := j.Parallel.DeviceMemory != "" && j.Parallel.DeviceMemory != "0"
	memory := 0
	var rules []string
	for _, k := range slices.Sorted(maps.Keys(rejected)) {
		if strings.HasPrefix(k, "memory:") {
			memory += rejected[k]
			continue
		}
		rules = append(rules, fmt.Sprintf("%s (%d)", k, rejected[k]))
	}
	switch {
	case budget && memory > 0:
		why := ""
		if refused != nil {
			why = fmt.Sprintf(" (the planner's best: %v)", refused)
		}
		return fmt.Errorf("parallel.plan=auto: no plan the engine runs fits parallel.device_memory=%q on %v devices%s: shrink [model] or train.micro_batch, or raise the budget", j.Parallel.DeviceMemory, devs, why)
	case refused != nil:
		return fmt.Errorf("parallel.plan=auto: the engine refuses the planner's plans on %v devices: %v", devs, refused)
	case len(rules) > 0:
		return fmt.Errorf("parallel.plan=auto: no plan suits this job's shape on %v devices (every candidate breaks a rule: %s): change train.global_batch, train.micro_batch or [model] to suit the device counts, or set them with --parallel and --devices",
			devs, strings.Join(rules, ", "))
	}
	return fmt.Errorf("parallel.plan=auto: no plan the engine runs on %v devices", devs)
}

// DryRun prints the prediction for the job's plan and returns: every
// rank's peak memory per tag and the step time split, on the cluster the
// run would use. It checks the job as Run does (Normalized: a plan's mbs
// is the micro-batch), so a plan it accepts runs.
func (j Job) DryRun(w io.Writer) error {
	j, err := j.Normalized()
	if err != nil {
		return err
	}
	s, err := j.resolve()
	if err != nil {
		return err
	}
	if s.peak, s.peakSrc, err = j.runPeak(s); err != nil {
		return err
	}
	pr, err := j.predict(s)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "plan %s on %d rank(s), predicted on the %s\nMFU against %s\n\n", j.engineShort(s.enginePlan), s.ranks, pr.Source, s.peakSrc)
	writePredictionOnly(w, pr)
	for _, r := range pr.Ranks {
		if s.budget > 0 && r.PeakAll > s.budget {
			fmt.Fprintf(w, "rank %d is predicted over the %s budget (parallel.device_memory): the run would stop out of memory\n", r.Rank, device.FormatBytes(s.budget))
			break
		}
	}
	if pr.Err != nil {
		return errors.New("dry run: the step time could not be predicted: " + pr.Err.Error())
	}
	return nil
}

// engineShort is p's text with the keys that differ from the engine's
// defaults (EnginePlan: fp32, no flash, the job's micro-batch), dp, tp and
// pp always: what parallel.plan needs to run p.
func (j Job) engineShort(p plan.Plan) string {
	base := plan.Default()
	base.Precision, base.Flash, base.MBS = plan.FP32, false, j.Train.MicroBatch
	var parts []string
	for _, k := range plan.Keys() {
		if v := p.Get(k); v != base.Get(k) || k == "dp" || k == "tp" || k == "pp" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ",")
}
