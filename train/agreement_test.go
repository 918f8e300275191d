package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"trellis/model"
)

// TestAgreementTable is the benchmark behind docs/BENCHMARKS.md
// ("Predicted against measured"): every plan of memoryGrid on a small GPT,
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
	fmt.Fprintln(&b, "| plan | ranks | peak predicted | peak measured | error | step predicted | step measured | error | exposed comm pred / meas |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	var memErr, timeErr []float64
	src := ""
	for _, p := range memoryGrid {
		j := tinyJob(p)
		j.Model = model.Config{Layers: 4, Hidden: 64, Heads: 4, SeqLen: 64, Vocab: 256}
		j.Train.Steps, j.Train.GlobalBatch, j.Train.Threads = 6, 8, 1
		j.Parallel.Cluster = os.Getenv("TRELLIS_CLUSTER")
		var metrics bytes.Buffer
		sum, err := Run(context.Background(), Options{Job: j, Metrics: &metrics})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		pr := sum.Prediction
		if pr == nil {
			t.Fatalf("%s: no prediction", p)
		}
		src = pr.Source
		var steps, exposed []float64
		sc := bufio.NewScanner(&metrics)
		sc.Buffer(nil, 1<<20)
		prev := 0.0
		for sc.Scan() {
			var m metricsLine
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			w := 0.0
			for _, r := range m.Ranks {
				w += r.CommWaitS / float64(len(m.Ranks))
			}
			if m.Step > 1 {
				steps, exposed = append(steps, m.StepS), append(exposed, w-prev)
			}
			prev = w
		}
		var worst, pPeak, mPeak float64
		for _, r := range sum.Ranks {
			pp, mp := float64(pr.Ranks[r.Rank].PeakAll), float64(r.PeakAll)
			if e := math.Abs(pp-mp) / mp; e >= worst {
				worst, pPeak, mPeak = e, pp, mp
			}
		}
		step, exp := median(steps), median(exposed)
		te := (pr.Time.Step - step) / step
		memErr, timeErr = append(memErr, worst), append(timeErr, math.Abs(te))
		fmt.Fprintf(&b, "| %s | %d | %.2f MiB | %.2f MiB | %.1f%% | %.3fs | %.3fs | %+.0f%% | %.3fs / %.3fs |\n",
			p, len(sum.Ranks), pPeak/(1<<20), mPeak/(1<<20), 100*worst, pr.Time.Step, step, 100*te, pr.Time.CommExposed, exp)
	}
	fmt.Fprintf(&b, "\n%d plans on the %s: peak memory error max %.2f%%; step time error median %.0f%%, max %.0f%%.\n",
		len(memoryGrid), src, 100*slices.Max(memErr), 100*median(slices.Clone(timeErr)), 100*slices.Max(timeErr))
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
