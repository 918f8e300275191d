package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trellis/model"
	"trellis/plan"
	"trellis/profile"
)

// agreementJob is the grid's job under plan p: a GPT of 4 layers, h = 128,
// 4 heads, s = 128, V = 256, micro-batch 2, global batch 8 (4 micro-batches
// on one replica), 10 steps (the first, which pages memory in, is left out
// of the medians), one kernel thread per rank, 16 KiB buckets: steps of
// tens of milliseconds, long enough to time on a shared machine.
func agreementJob(p string) Job {
	j := tinyJob(p)
	j.Model = model.Config{Layers: 4, Hidden: 128, Heads: 4, SeqLen: 128, Vocab: 256}
	j.Train.Steps, j.Train.GlobalBatch, j.Train.Threads = 10, 8, 1
	return j
}

// agreementLlamaJob is agreementJob with a Llama of the same width, depth
// and heads: 4 query heads on 2 key/value heads, a SwiGLU of 352 (about
// 8h/3), the untied head.
func agreementLlamaJob(p string) Job {
	j := agreementJob(p)
	j.Model = model.Config{Arch: "llama", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, FFN: 352, SeqLen: 128, Vocab: 256}
	return j
}

// agreementRow is one row of the grid: its label and job.
type agreementRow struct {
	label string
	job   Job
}

// agreementRows are the grid's rows: every plan of memoryGrid on the GPT,
// then every plan of llamaMemoryGrid on the Llama ("llama …"); with
// TRELLIS_AGREEMENT_ROWS (labels separated by ";") only those.
func agreementRows() []agreementRow {
	var rows []agreementRow
	for _, p := range memoryGrid {
		rows = append(rows, agreementRow{p, agreementJob(p)})
	}
	for _, p := range llamaMemoryGrid {
		rows = append(rows, agreementRow{"llama " + p, agreementLlamaJob(p)})
	}
	if only := os.Getenv("TRELLIS_AGREEMENT_ROWS"); only != "" {
		want := strings.Split(only, ";")
		rows = slices.DeleteFunc(rows, func(r agreementRow) bool { return !slices.Contains(want, r.label) })
	}
	return rows
}

// TestAgreementTable is the benchmark behind docs/BENCHMARKS.md
// ("Predicted against measured"): every plan of memoryGrid on a small GPT
// and of llamaMemoryGrid on a Llama of its size,
// each rank's predicted peak against the measured, and the predicted step
// time (on TRELLIS_CLUSTER, a `trellis profile` file, or the built-in
// estimate) against the median measured step after the first. It runs
// only when TRELLIS_AGREEMENT names the Markdown file to write
// (scripts/agreement.sh); timing is no test's business.
func TestAgreementTable(t *testing.T) {
	out := os.Getenv("TRELLIS_AGREEMENT")
	if out == "" {
		t.Skip("set TRELLIS_AGREEMENT=FILE (scripts/agreement.sh) to measure the agreement table")
	}
	var b strings.Builder
	only := os.Getenv("TRELLIS_AGREEMENT_ONLY") // "grid" or "auto": one of the two tables
	if only != "auto" {
		agreementGrid(t, &b)
	}
	if only != "grid" {
		autoTable(t, &b, os.Getenv("TRELLIS_CLUSTER"))
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

// stepTimes is the step_s of every --metrics line after the first (which
// pages memory in and fills the buffer pools).
func stepTimes(t *testing.T, metrics *bytes.Buffer) []float64 {
	t.Helper()
	var out []float64
	sc := bufio.NewScanner(metrics)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m metricsLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Step > 1 {
			out = append(out, m.StepS)
		}
	}
	if len(out) == 0 {
		t.Fatal("no step after the first")
	}
	return out
}

// loadAverage is /proc/loadavg's 1-minute figure ("?" where unknown).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// agreementGrid writes the grid's table: every plan of memoryGrid on
// agreementJob, predicted against measured.
func agreementGrid(t *testing.T, b *strings.Builder) {
	fmt.Fprintln(b, "| plan | ranks | peak predicted | peak measured | error | step predicted | step measured (fastest) | error | median step (error) | cores' speedup before | compute pred / meas | exposed comm pred / meas | bubble pred / meas | misc pred / meas |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	load0 := loadAverage()
	type result struct {
		sum   *Summary
		steps []float64
		best  float64 // the run's median step
		cores float64 // the cores' speedup measured just before the run
	}
	// Three passes over the grid, so that a plan that ran while another
	// process took a core has other chances (on the 2-vCPU machine the
	// second vCPU comes and goes within seconds); each plan's row is its
	// quietest run's, the one of lowest median step: the split is a
	// median over the run's steps, and a run whose fastest step was quick
	// but which lost a vCPU for half of its steps (tp=2,sp=on: fastest
	// 39.9 ms, median 50.0) put its compute a third over the prediction
	// where the quiet runs agree. Before each run the cores' speedup is measured again
	// (in about 0.1 s) and noted beside it: the prediction keeps the
	// profile's, the note says what the run had.
	rows := agreementRows()
	res := make([]result, len(rows))
	for pass := 0; pass < 3; pass++ {
		for i, p := range rows {
			cores, err := profile.SpeedupNow(context.Background(), runtime.NumCPU(), 25*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			sum, steps := runAgreement(t, p)
			if best := median(slices.Clone(steps)); res[i].sum == nil || best < res[i].best {
				res[i] = result{sum, steps, best, cores}
			}
		}
	}
	// A plan none of whose runs had the cores the profile measured (the
	// speedup before its fastest run under 85% of core_speedup: another
	// process held a vCPU) runs again, up to three times, each after
	// waiting (up to 5 s) for the cores to come back; the row says what
	// its run had.
	want := profileSpeedup(t, os.Getenv("TRELLIS_CLUSTER"))
	retried := 0
	for i, p := range rows {
		for try := 0; try < 3 && res[i].cores < 0.85*want; try++ {
			cores := waitForCores(t, want)
			sum, steps := runAgreement(t, p)
			retried++
			if best := median(slices.Clone(steps)); best < res[i].best {
				res[i] = result{sum, steps, best, cores}
			}
		}
	}
	var memErr, timeErr, medErr []float64
	var llamaTime []float64
	var splitN int
	var splitOut []string
	src := ""
	for i, row := range rows {
		p := row.label
		sum, steps := res[i].sum, res[i].steps
		pr := sum.Prediction
		src = pr.Source
		var worst, pPeak, mPeak float64
		for _, r := range sum.Ranks {
			pp, mp := float64(pr.Ranks[r.Rank].PeakAll), float64(r.PeakAll)
			if e := math.Abs(pp-mp) / mp; e >= worst {
				worst, pPeak, mPeak = e, pp, mp
			}
		}
		step, med := slices.Min(steps), median(slices.Clone(steps))
		te, tm := (pr.Time.Step-step)/step, (pr.Time.Step-med)/med
		memErr, timeErr, medErr = append(memErr, worst), append(timeErr, math.Abs(te)), append(medErr, math.Abs(tm))
		if row.job.Model.IsLlama() {
			llamaTime = append(llamaTime, math.Abs(te))
		}
		pt := pr.Time
		n, out := splitMisses(p, pt, sum, med)
		splitN, splitOut = splitN+n, append(splitOut, out...)
		fmt.Fprintf(b, "| %s | %d | %.2f MiB | %.2f MiB | %.1f%% | %.1f ms | %.1f ms | %+.0f%% | %.1f ms (%+.0f%%) | %.2f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f |\n",
			p, len(sum.Ranks), pPeak/(1<<20), mPeak/(1<<20), 100*worst, 1e3*pt.Step, 1e3*step, 100*te, 1e3*med, 100*tm, res[i].cores,
			1e3*pt.Compute, 1e3*sum.ComputeSeconds, 1e3*pt.CommExposed, 1e3*sum.ExposedSeconds, 1e3*pt.Bubble, 1e3*sum.BubbleSeconds, 1e3*pt.Misc, 1e3*sum.MiscSeconds)
	}
	fmt.Fprintf(b, "\n%d plans on the %s (core_speedup %.2f; %d runs again for the cores), load average %s before and %s after: peak memory error max %.2f%%; step time error (fastest step of the quietest of three runs) median %.0f%%, max %.0f%%; against that run's median step median %.0f%%, max %.0f%%. Split columns in ms: the ranks' mean, median over steps.\n",
		len(rows), src, want, retried, load0, loadAverage(), 100*slices.Max(memErr), 100*median(slices.Clone(timeErr)), 100*slices.Max(timeErr),
		100*median(slices.Clone(medErr)), 100*slices.Max(medErr))
	if len(llamaTime) > 0 {
		fmt.Fprintf(b, "The %d Llama rows alone: step time error median %.0f%%, max %.0f%%.\n", len(llamaTime), 100*median(slices.Clone(llamaTime)), 100*slices.Max(llamaTime))
	}
	fmt.Fprintf(b, "The split: %d of %d parts that are at least 10%% of their step (predicted or measured) agree within 25%% of the prediction", splitN-len(splitOut), splitN)
	if len(splitOut) > 0 {
		fmt.Fprintf(b, "; outside: %s", strings.Join(splitOut, ", "))
	}
	fmt.Fprintln(b, ".")
}

// splitMisses holds a row's split to issue 28's bound: each of compute,
// exposed comm, bubble and misc that is at least 10% of its step (the
// predicted part of the predicted step, or the measured part of the
// median step med) within 25% of the prediction. It returns how many
// parts were held and the ones outside, as "plan part pred/meas ms".
func splitMisses(label string, pt plan.Time, sum *Summary, med float64) (int, []string) {
	n, out := 0, []string(nil)
	for _, part := range []struct {
		name       string
		pred, meas float64
	}{{"compute", pt.Compute, sum.ComputeSeconds}, {"comm", pt.CommExposed, sum.ExposedSeconds}, {"bubble", pt.Bubble, sum.BubbleSeconds}, {"misc", pt.Misc, sum.MiscSeconds}} {
		if part.pred < 0.1*pt.Step && part.meas < 0.1*med {
			continue
		}
		n++
		if part.pred <= 0 || math.Abs(part.meas/part.pred-1) > 0.25 {
			out = append(out, fmt.Sprintf("%s %s %.1f/%.1f ms", label, part.name, 1e3*part.pred, 1e3*part.meas))
		}
	}
	return n, out
}

// profileSpeedup is the core_speedup of the cluster file at path (0 when
// it has none).
func profileSpeedup(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "core_speedup = "); ok {
			f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			return f
		}
	}
	return 0
}

// waitForCores measures the cores' speedup until it is at least 85% of
// want, for at most about 5 s, and returns the last measurement.
func waitForCores(t *testing.T, want float64) float64 {
	t.Helper()
	cores := 0.0
	for wait := 0; wait < 10; wait++ {
		var err error
		if cores, err = profile.SpeedupNow(context.Background(), runtime.NumCPU(), 25*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if cores >= 0.85*want {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	return cores
}

// runAgreement trains the row's job on the cluster file TRELLIS_CLUSTER
// names and returns its summary (with a prediction) and step times.
func runAgreement(t *testing.T, row agreementRow) (*Summary, []float64) {
	t.Helper()
	j, p := row.job, row.label
	j.Parallel.Cluster = os.Getenv("TRELLIS_CLUSTER")
	var metrics bytes.Buffer
	sum, err := Run(context.Background(), Options{Job: j, Metrics: &metrics})
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if sum.Prediction == nil {
		t.Fatalf("%s: no prediction", p)
	}
	return sum, stepTimes(t, &metrics)
}
