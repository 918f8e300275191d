package train

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"trellis/model"
)

// autoJobs are the jobs the planner's choice is checked on: the agreement
// grid's job on 4 and on 2 devices, on 4 devices of 20 MiB (dp=1's 24.7
// MiB does not fit: only sharded plans do), and a deeper, narrower model.
func autoJobs(cluster string) []struct {
	name string
	j    Job
} {
	a4, a2, b4, d4 := agreementJob(""), agreementJob(""), agreementJob(""), agreementJob("")
	a4.Parallel.Devices, a2.Parallel.Devices, b4.Parallel.Devices, d4.Parallel.Devices = 4, 2, 4, 4
	b4.Parallel.DeviceMemory = "20MiB"
	d4.Model = model.Config{Layers: 8, Hidden: 64, Heads: 4, SeqLen: 128, Vocab: 256}
	out := []struct {
		name string
		j    Job
	}{{"grid job, 4 devices", a4}, {"grid job, 2 devices", a2}, {"grid job, 4 devices of 20 MiB", b4}, {"8 layers h=64, 4 devices", d4}}
	for i := range out {
		out[i].j.Parallel.Cluster = cluster
	}
	return out
}

// autoTable runs, for each of autoJobs, every plan the planner's search
// finds that fits and the engine runs (autoCandidates: what --parallel
// auto chooses among), and compares the plan auto chooses (the first)
// with the fastest measured: the planner is useful when its choice's
// measured step is within 10% of the fastest's.
func autoTable(t *testing.T, b *strings.Builder, cluster string) {
	fmt.Fprintln(b, "\n| job | plans that fit, run | auto's choice | its step predicted / measured | fastest measured | its step predicted / measured | auto / fastest |")
	fmt.Fprintln(b, "|---|---|---|---|---|---|---|")
	// Every run waits (up to about 5 s) for the cores the profile
	// measured, as the grid's second chances do: another process holding
	// a vCPU makes another machine.
	want := profileSpeedup(t, cluster)
	var worst float64
	for _, job := range autoJobs(cluster) {
		cands, _, _, err := job.j.autoCandidates()
		if err != nil || len(cands) == 0 {
			t.Fatalf("%s: no candidate (%v)", job.name, err)
		}
		type run struct {
			txt        string
			pred, meas float64
			d          int
		}
		var runs []run
		var failed []string
		seen := map[string]bool{}
		for _, c := range cands {
			txt := job.j.engineShort(c.e.Plan)
			if seen[txt] {
				continue
			}
			seen[txt] = true
			waitForCores(t, want)
			var metrics bytes.Buffer
			if _, err := Run(context.Background(), Options{Job: job.j.withPlan(txt, c.d), Metrics: &metrics}); err != nil {
				if !strings.Contains(err.Error(), "out of memory") {
					t.Fatalf("%s: %s: %v", job.name, txt, err)
				}
				// Predicted to fit, ran out: a pipeline's early messages
				// (the comm tag, whose peak depends on timing) on a tight
				// budget. Listed, not compared.
				failed = append(failed, txt)
				continue
			}
			runs = append(runs, run{txt, c.e.Time.Step, slices.Min(stepTimes(t, &metrics)), c.d})
		}
		// The finals: the plans the screening found fastest are, by that
		// very selection, the ones whose one run was luckiest with the
		// load (the minimum over 18–64 noisy runs sits below any plan's
		// typical step), so auto's choice and the three fastest are run
		// again, alternated, finalRounds times each, and compared by the
		// median over those rounds of each run's median step: fresh
		// measurements, side by side.
		order := make([]int, len(runs))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return cmpF(runs[a].meas, runs[b].meas) })
		finals := []int{0}
		for _, i := range order[:min(3, len(order))] {
			if i != 0 {
				finals = append(finals, i)
			}
		}
		rounds := make([][]float64, len(runs))
		for round := range finalRounds {
			for k := range finals {
				i := finals[(k+round)%len(finals)]
				waitForCores(t, want)
				var metrics bytes.Buffer
				if _, err := Run(context.Background(), Options{Job: job.j.withPlan(runs[i].txt, runs[i].d), Metrics: &metrics}); err != nil {
					t.Fatalf("%s: final %s: %v", job.name, runs[i].txt, err)
				}
				rounds[i] = append(rounds[i], median(stepTimes(t, &metrics)))
			}
		}
		for _, i := range finals {
			runs[i].meas = median(rounds[i])
		}
		fast := runs[finals[0]]
		for _, i := range finals[1:] {
			if runs[i].meas < fast.meas {
				fast = runs[i]
			}
		}
		choice := runs[0]
		r := choice.meas / fast.meas
		worst = math.Max(worst, r)
		ran := fmt.Sprint(len(runs))
		if len(failed) > 0 {
			ran += fmt.Sprintf(" (+%d out of memory: %s)", len(failed), strings.Join(failed, "; "))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.1f / %.1f ms | %s | %.1f / %.1f ms | %.2f |\n",
			job.name, ran, choice.txt, 1e3*choice.pred, 1e3*choice.meas, fast.txt, 1e3*fast.pred, 1e3*fast.meas, r)
	}
	fmt.Fprintf(b, "\nauto's choice against the fastest plan measured: every plan that fits run once (its fastest step after the first); then auto's choice and the three fastest of those run again, alternated, %d times each, and compared by the median over those runs of each run's median step after the first (every run after waiting for the profiled cores): worst %.2f× (target ≤ 1.10×).\n", finalRounds, worst)
}

// finalRounds is how often each finalist of the auto check runs again.
const finalRounds = 3

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
