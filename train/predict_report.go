package train

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"trellis/device"
	"trellis/metrics"
	"trellis/plan"
)

// Prediction is what the planner's model predicts for the run's plan
// before it starts: every rank's peak memory per tag and one step's time,
// on the cluster Source names.
type Prediction struct {
	Source string      // the cluster: a file's path or the built-in estimate
	Ranks  []Predicted // by rank
	Time   plan.Time   // one optimizer step (zero: not predicted, see Err)
	Err    error       // why the step time was not predicted (nil: it was)
	// Uncovered names the parts of the step the model does not describe
	// as the run measures them, with why: the table marks the row's error
	// with a * and prints the reason under it.
	Uncovered map[string]string
}

// uncovered is what the model does not cover for a run of s: links a
// launched world does not emulate. (Where ranks outnumber the cores, the
// split's clocks book a wait that other ranks fill as compute and the
// cores' idle time as communication, comm.Crowding, as the model
// predicts them: plan.Job.onHost.)
func (j Job) uncovered(s settings) map[string]string {
	out := map[string]string{}
	if s.processes && (s.linkBW > 0 || s.linkLat > 0) {
		out["exposed comm"] = "not modelled: parallel.link_* are emulated only between goroutine ranks (comm/local), not between processes"
	}
	return out
}

// predict is the run's prediction (nil, err when the plan cannot be
// described to the planner; the run goes on without one).
func (j Job) predict(s settings) (*Prediction, error) {
	c, src, err := j.jobCluster(s)
	if err != nil {
		return nil, err
	}
	ranks, err := j.predictMemory(s, c)
	if err != nil {
		return nil, err
	}
	pr := &Prediction{Source: src, Ranks: ranks, Uncovered: j.uncovered(s)}
	e, err := j.planJob(s, c, 0, 0).Evaluate(s.enginePlan)
	if err != nil {
		pr.Err = err
	} else {
		pr.Time = e.Time
	}
	return pr, nil
}

// rankJSON is rank r's prediction for --metrics (nil: none).
func (pr *Prediction) rankJSON(r int) *metrics.Tags {
	if pr == nil || r < 0 || r >= len(pr.Ranks) {
		return nil
	}
	t := tagsOf(pr.Ranks[r].Peak, pr.Ranks[r].PeakAll)
	return &t
}

// tagsOf is peak bytes per device tag, and of all at once, as --metrics
// writes them.
func tagsOf(peak [6]int64, all int64) metrics.Tags {
	return metrics.Tags{Param: peak[device.Param], Grad: peak[device.Grad], Optim: peak[device.Optim],
		Act: peak[device.Act], Workspace: peak[device.Workspace], Comm: peak[device.Comm], Peak: all}
}

// stepS is the predicted step time for --metrics (0: none).
func (pr *Prediction) stepS() float64 {
	if pr == nil || pr.Err != nil {
		return 0
	}
	return pr.Time.Step
}

// writePrediction prints predicted against measured: every rank's peak
// bytes per tag, then one step's time split as the planner splits it,
// against the engine's measured split (train/split.go: the ranks' mean,
// median over steps).
func writePrediction(w io.Writer, s *Summary) {
	pr := s.Prediction
	if pr == nil {
		return
	}
	fmt.Fprintf(w, "\npredicted vs measured (the planner's model on the %s):\n\n", pr.Source)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"rank"}
	for _, t := range device.Tags() {
		hdr = append(hdr, t.String())
	}
	fmt.Fprintln(tw, strings.Join(append(hdr, "peak", "error", ""), "\t"))
	for _, r := range s.Ranks {
		if r.Rank >= len(pr.Ranks) {
			continue
		}
		p := pr.Ranks[r.Rank]
		row := []string{fmt.Sprint(r.Rank)}
		for i, t := range device.Tags() {
			row = append(row, mib(p.Peak[i])+"/"+mib(r.Peak[t]))
		}
		row = append(row, mib(p.PeakAll)+"/"+mib(r.PeakAll), pct(float64(p.PeakAll), float64(r.PeakAll)), "")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w, "(MiB, predicted/measured; comm is an upper bound of the buffers in flight)")
	if pr.Err != nil {
		fmt.Fprintf(w, "\nstep time: not predicted: %v\n", pr.Err)
		return
	}
	nan0 := func(x float64) float64 {
		if math.IsNaN(x) {
			return 0
		}
		return x
	}
	t := pr.Time
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step time\tpredicted\tmeasured\terror\t")
	for _, row := range []struct {
		name       string
		pred, meas float64
	}{
		{"compute", t.Compute, s.ComputeSeconds},
		{"exposed comm", t.CommExposed, s.ExposedSeconds},
		{"bubble", t.Bubble, s.BubbleSeconds},
		{"misc", t.Misc, s.MiscSeconds},
		{"step", t.Step, s.StepSeconds},
	} {
		m, e := nan0(row.meas), pct(row.pred, nan0(row.meas))
		if pr.Uncovered[row.name] != "" {
			e += " *"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", row.name, secs(row.pred), secs(m), e)
		if row.name == "exposed comm" && (t.CP > 0 || s.RingSeconds > 0) {
			fmt.Fprintf(tw, "  of which cp ring\t%s\t%s\t%s\t\n", secs(t.CP), secs(s.RingSeconds), pct(t.CP, s.RingSeconds))
		}
		if row.name == "exposed comm" && (t.EP > 0 || s.EPSeconds > 0) {
			fmt.Fprintf(tw, "  of which ep all-to-all\t%s\t%s\t%s\t\n", secs(t.EP), secs(s.EPSeconds), pct(t.EP, s.EPSeconds))
		}
	}
	tw.Flush()
	writeUncovered(w, pr)
	fmt.Fprintln(w, "(measured: the ranks' mean, median over the steps; the parts' medians need not add up to the step's)")
}

func mib(b int64) string { return fmt.Sprintf("%.2f", float64(b)/(1<<20)) }

func secs(x float64) string { return fmt.Sprintf("%.4gs", x) }

// pct is (pred − meas)/meas as a signed percentage ("-" when meas is 0).
func pct(pred, meas float64) string {
	if meas == 0 || math.IsNaN(meas) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(pred-meas)/meas)
}

// medianDur is the median of a run's step times, in seconds.
func medianDur(ds []time.Duration) float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = d.Seconds()
	}
	return median(xs)
}

// writePredictionOnly prints a prediction with nothing measured (a dry run).
func writePredictionOnly(w io.Writer, pr *Prediction) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"rank"}
	for _, t := range device.Tags() {
		hdr = append(hdr, t.String())
	}
	fmt.Fprintln(tw, strings.Join(append(hdr, "peak", ""), "\t"))
	for _, p := range pr.Ranks {
		row := []string{fmt.Sprint(p.Rank)}
		for i := range device.Tags() {
			row = append(row, device.FormatBytes(p.Peak[i]))
		}
		fmt.Fprintln(tw, strings.Join(append(row, device.FormatBytes(p.PeakAll), ""), "\t"))
	}
	tw.Flush()
	if pr.Err != nil {
		return
	}
	t := pr.Time
	fmt.Fprintf(w, "\nstep %s = compute %s + exposed comm %s + bubble %s + misc %s\n",
		secs(t.Step), secs(t.Compute), secs(t.CommExposed), secs(t.Bubble), secs(t.Misc))
	if t.CP > 0 || t.EP > 0 {
		fmt.Fprintf(w, "exposed comm: tp %s, cp ring %s, pp %s, ep all-to-all %s, dp/zero %s\n", secs(t.TP), secs(t.CP), secs(t.PP), secs(t.EP), secs(t.DP))
	}
	writeUncovered(w, pr)
}

// writeUncovered prints the parts of the step the model does not cover.
func writeUncovered(w io.Writer, pr *Prediction) {
	for _, k := range []string{"compute", "exposed comm", "bubble", "misc"} {
		if why := pr.Uncovered[k]; why != "" {
			fmt.Fprintf(w, "* %s: %s\n", k, why)
		}
	}
}
