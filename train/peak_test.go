package train

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"trellis/config"
	"trellis/plan"
	"trellis/trace"
)

// burn keeps every CPU busy until the returned stop is called: the load
// under which a peak measured inside the run came out low.
func burn() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < runtime.NumCPU(); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 1.0
			for !done.Load() {
				for k := 0; k < 1000; k++ {
					x = x*1.0000001 + 1e-9
				}
			}
			_ = x
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// The same dry-run gives the same prediction, however loaded the machine
// is (nothing is measured), and states the peak MFU is against; auto's
// "chose" line predicts what the dry run of its choice does.
func TestDryRunHoldsStill(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan = Auto
	ch, err := j.ChoosePlan()
	if err != nil {
		t.Fatal(err)
	}
	j = j.withPlan(ch.Plan, ch.Devices)
	var quiet strings.Builder
	if err := j.DryRun(&quiet); err != nil {
		t.Fatal(err)
	}
	stop := burn()
	var loaded strings.Builder
	err = j.DryRun(&loaded)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if quiet.String() != loaded.String() {
		t.Errorf("the same dry run under load printed another prediction:\n%s\nthen\n%s", quiet.String(), loaded.String())
	}
	if !strings.Contains(quiet.String(), "MFU against ") {
		t.Errorf("the dry run does not say which peak MFU is against:\n%s", quiet.String())
	}
	chose := regexp.MustCompile(`predicted step ([0-9.e+-]+)s`).FindStringSubmatch(ch.Why[0])
	dry := regexp.MustCompile(`\nstep ([0-9.e+-]+)s = `).FindStringSubmatch(quiet.String())
	if chose == nil || dry == nil || chose[1] != dry[1] {
		t.Errorf("auto's choice predicted %v, its dry run %v:\n%s\n%s", chose, dry, ch.Why[0], quiet.String())
	}
}

// The stated peak: a profile's cluster file gives one core's peak as the
// device's × devices_per_node / cores; without a file, the built-in
// figure for the kernels' ISA, above every CPU measured.
func TestStatedPeak(t *testing.T) {
	f := filepath.Join(t.TempDir(), "host.toml")
	data, err := os.ReadFile(hostProfile)
	if err != nil {
		t.Fatal(err)
	}
	// A profile of 2-thread devices: one per node on 2 cores.
	s := strings.Replace(string(data), "devices_per_node = 2", "devices_per_node = 1", 1)
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	j := DefaultJob()
	j.Parallel.Cluster = f
	for _, c := range []struct {
		p    plan.Precision
		want float64
	}{{plan.FP32, 0.0929e12 / 2}, {plan.BF16, 0.1765e12 / 2}} {
		got, src, err := j.statedPeak(c.p)
		if err != nil || got != c.want || !strings.Contains(src, f) {
			t.Errorf("%s: %g (%s, %v), want %g", c.p, got, src, err, c.want)
		}
	}
	for isa, want := range map[string]float64{"avx512": 236.8e9, "avx2": 118.4e9} {
		if got := builtinCorePeak(isa, plan.FP32); got != want {
			t.Errorf("%s: %g, want %g", isa, got, want)
		}
	}
	if builtinCorePeak("avx512", plan.BF16) < 210e9 {
		t.Error("the built-in avx512 peak is below the fastest core measured (210 GFLOP/s)")
	}
}

// A run's MFU is against the stated peak, never above 100%, on a loaded
// machine too, and the summary says which peak.
func TestRunMFUStatedPeak(t *testing.T) {
	j := tinyJob("dp=2")
	j.Train.Steps = 3
	stop := burn()
	sum, err := Run(context.Background(), Options{Job: j})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if !(sum.MFU > 0 && sum.MFU <= 1) || !strings.Contains(sum.Peak, "built-in") {
		t.Errorf("MFU %g against %q", sum.MFU, sum.Peak)
	}
}

// The slow-link example's emulated links (parallel.link_*) enter the
// prediction: its exposed communication, measured at 0.434 s a step on
// the 2-vCPU machine (issue 28; 0.87 s on a loaded one), is predicted
// within 30% (it was 0.5 ms: the links were not in the model), and the
// dry run names the links and the term the model does not cover.
func TestSlowLinksPredicted(t *testing.T) {
	if runtime.NumCPU() != 2 {
		t.Skipf("the measurement is of 4 ranks on 2 cores; this machine has %d", runtime.NumCPU())
	}
	j := DefaultJob()
	if err := config.Load(&j, "../examples/zero3-slow-links.toml", nil); err != nil {
		t.Fatal(err)
	}
	s, err := j.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.peak, s.peakSrc, err = j.runPeak(s); err != nil {
		t.Fatal(err)
	}
	pr, err := j.predict(s)
	if err != nil || pr.Err != nil {
		t.Fatal(err, pr.Err)
	}
	const measured = 0.434
	if got := pr.Time.CommExposed; math.Abs(got/measured-1) > 0.30 {
		t.Errorf("exposed comm predicted %.4g s, measured %.4g s: %+.0f%%", got, measured, 100*(got/measured-1))
	}
	var b strings.Builder
	if err := j.DryRun(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"with the emulated links (parallel.link_*: 200 MB/s, 100µs)", "* exposed comm: not modelled as measured: 4 rank threads share 2 cores"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("dry run lacks %q:\n%s", want, b.String())
		}
	}
}

// Under auto a global batch the micro-batch does not divide is named as
// the divisibility rule it breaks, not as a memory or shape problem.
func TestAutoGlobalBatchDivisibility(t *testing.T) {
	j := DefaultJob()
	j.Parallel.Plan, j.Train.GlobalBatch = Auto, 7
	_, err := j.ChoosePlan()
	if err == nil || !strings.Contains(err.Error(), "train.global_batch=7 is not a multiple of train.micro_batch=2") || strings.Contains(err.Error(), "memory") {
		t.Errorf("global_batch=7 under auto: %v", err)
	}
}

// The step log prints the learning rate to 4 significant digits, not 17.
func TestStepLogLR(t *testing.T) {
	j := tinyJob("dp=1")
	j.Train.Steps, j.Train.Warmup, j.Train.LR = 3, 3, 2.6850842073984193e-3
	var b strings.Builder
	if _, err := Run(context.Background(), Options{Job: j, Log: slog.New(slog.NewTextHandler(&b, nil))}); err != nil {
		t.Fatal(err)
	}
	lrs := regexp.MustCompile(` lr=([0-9.e+-]+)`).FindAllStringSubmatch(b.String(), -1)
	if len(lrs) == 0 {
		t.Fatalf("no lr in the log:\n%s", b.String())
	}
	for _, m := range lrs {
		if digits := strings.TrimLeft(strings.NewReplacer(".", "", "-", "").Replace(strings.Split(m[1], "e")[0]), "0"); len(digits) > 4 {
			t.Errorf("lr=%s: more than 4 significant digits", m[1])
		}
	}
}

// --trace on a resumed run keeps the earlier run's steps: the resumed
// steps are appended to the same timeline, not written over it.
func TestTraceResumeAppends(t *testing.T) {
	dir, ck := t.TempDir(), t.TempDir()
	j := tinyJob("dp=2")
	j.Train.Steps = 4
	j.Checkpoint.Dir = ck
	if _, err := Run(context.Background(), Options{Job: j, Until: 2, Trace: dir}); err != nil {
		t.Fatal(err)
	}
	first, err := trace.Read(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Job: j, Resume: ck, Trace: dir}); err != nil {
		t.Fatal(err)
	}
	both, err := trace.Read(filepath.Join(dir, "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, e := range first {
		end = max(end, e.TS)
	}
	kept, later := 0, 0
	for _, e := range both {
		switch {
		case e.Ph == "M":
		case e.TS <= end:
			kept++
		default:
			later++
		}
	}
	if n := len(first); kept < n-20 || later == 0 {
		t.Errorf("after the resume the trace holds %d of the first run's %d events and %d later ones", kept, n, later)
	}
}
