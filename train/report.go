package train

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"trellis/data"
	"trellis/device"
	"trellis/metrics"
	"trellis/precision"
)

// reporter is rank 0's voice: metrics lines, log lines or a progress bar,
// samples and the end-of-run summary. On other ranks it is silent.
type reporter struct {
	o          Options
	on         bool
	tokens     float64 // tokens per optimizer step, all ranks
	flops      float64 // model FLOPs per token
	peak       float64 // FLOP/s of the cores in use (stated: runPeak)
	peakSrc    string
	bar        *progressbar.ProgressBar
	tps, mfu   []float64
	steps      []time.Duration
	exposed    []float64          // per step: the ranks' mean wait for collectives, seconds
	waitSoFar  float64            // the ranks' mean cumulative wait after the last step
	ring       []float64          // per step: the ranks' mean wait for the ring (cp), seconds
	ringSoFar  float64            // its cumulative mean after the last step
	epWaits    []float64          // per step: the ranks' mean wait on ep's all-to-alls, seconds
	epSoFar    float64            // its cumulative mean after the last step
	parts      [][3]float64       // per step: the ranks' mean compute, bubble and misc, seconds
	partsSoFar [3]float64         // their cumulative means after the last step
	pred       *Prediction        // the planner's prediction (nil: none)
	metricsErr error              // the first failed metrics write (reported once)
	budget     int64              // bytes per device, 0: none
	header     *metrics.RunHeader // for the first --metrics line (nil once written)
	lineSample *string            // the sample generated at the step being written, if any
	skipped    int                // fp16: steps skipped for overflowing gradients
	scale      float64            // fp16: the loss scale of the last step

	experts *metrics.Experts // an MoE model's routing over the last step
}

func newReporter(o Options, s settings, r *rank, start, end int) *reporter {
	rep := &reporter{o: o, on: r.id == 0 || (o.World != nil && o.Report)}
	if !rep.on {
		return rep
	}
	logData(o.Log, o.Job.Data, r.loader)
	if w := o.Job.Train.Warmup; s.warmup != w {
		o.Log.Warn("warmup clamped", "train.warmup", w, "train.steps", o.Job.Train.Steps,
			"note", fmt.Sprintf("the learning rate warms up over all %d steps", s.warmup))
	}
	rep.tokens = float64(o.Job.Train.GlobalBatch * o.Job.Model.SeqLen)
	rep.flops = o.Job.Model.FLOPsPerToken()
	rep.peak, rep.peakSrc = s.peak, s.peakSrc
	if pr, err := o.Job.predict(s); err != nil {
		o.Log.Warn("no prediction", "err", err)
	} else {
		rep.pred = pr
		args := []any{"cluster", pr.Source, "peak_bytes_rank0", pr.Ranks[0].PeakAll}
		if pr.Err == nil {
			args = append(args, "step_s", round4(pr.Time.Step))
		}
		o.Log.Info("prediction", args...)
	}
	rep.budget = s.budget
	info := runInfo(o, s, start, end)
	rep.header = &metrics.RunHeader{Plan: info.Plan, Model: info.Model, Params: info.Params, Ranks: info.Ranks,
		TokensPerStep: info.TokensPerStep, FromStep: start, ToStep: end, MFUPeak: s.peakSrc}
	if o.Observer != nil {
		o.Observer.Start(info)
	}
	o.Log.Info("run", "plan", runPlanText(s.enginePlan), "ranks", s.ranks, "threads_per_rank", s.threads,
		"params", o.Job.Model.NumParams(), "accum", s.accum, "tokens_per_step", int(rep.tokens),
		"kernels", r.k.ISA(), "mfu_peak", s.peakSrc, "device_memory", budgetText(s.budget), "from_step", start, "to_step", end,
		"checkpoint_dir", o.Job.Checkpoint.Dir)
	if note := recomputeNote(s.enginePlan); note != "" {
		o.Log.Info("recompute", "note", note)
	}
	if f := s.policy.F8; f.Recipe != precision.NoFP8 {
		o.Log.Info("fp8", "recipe", f.Recipe.String(), "history", f.History, "margin", f.Margin, "tile", f.Tile,
			"note", "fp8 is emulated exactly on the CPU (bf16 GEMMs on dequantised fp8 operands): for numerics and memory, not speed")
	}
	if r.id != 0 {
		o.Log.Info("this process reports for its node", "rank", r.id, "note", "--metrics and checkpoints are written by rank 0")
	}
	if o.Progress != nil {
		rep.bar = progressbar.NewOptions(end-start,
			progressbar.OptionSetWriter(o.Progress), progressbar.OptionSetWidth(24),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	}
	return rep
}

// logData says what the run trains on: one line with the source, its size
// on disk (a file), its tokens and the train/validation split.
func logData(log *slog.Logger, d data.Config, l *data.Loader) {
	args := []any{"source", d.Source, "tokenizer", l.Tokenizer().Name()}
	if st, err := os.Stat(d.Source); err == nil && st.Mode().IsRegular() {
		args = append(args, "bytes", st.Size())
	}
	tr, va := l.TrainTokens(), l.ValTokens()
	args = append(args, "tokens", tr+va, "train_tokens", tr, "val_tokens", va,
		"train_sequences", l.TrainSamples(), "val_sequences", l.ValSamples())
	log.Info("data", args...)
}

func budgetText(b int64) string {
	if b == 0 {
		return "unlimited"
	}
	return device.FormatBytes(b)
}

// metricsLine is one line of --metrics (its schema: package metrics).
type metricsLine = metrics.Line

func (rep *reporter) step(done int, res stepResult, val float64, dt time.Duration, stats []RankStats) {
	if !rep.on {
		return
	}
	tps := rep.tokens / dt.Seconds()
	mfu := tps * rep.flops / rep.peak
	if res.skipped {
		rep.skipped++
	}
	rep.scale, rep.experts = res.scale, res.experts
	rep.tps, rep.mfu, rep.steps = append(rep.tps, tps), append(rep.mfu, mfu), append(rep.steps, dt)
	if len(stats) > 0 {
		w := 0.0
		for _, s := range stats {
			w += s.CommWait.Seconds()
		}
		w /= float64(len(stats))
		rep.exposed, rep.waitSoFar = append(rep.exposed, w-rep.waitSoFar), w
		rw := 0.0
		for _, s := range stats {
			rw += s.RingWait.Seconds() / float64(len(stats))
		}
		rep.ring, rep.ringSoFar = append(rep.ring, rw-rep.ringSoFar), rw
		ew := 0.0
		for _, s := range stats {
			ew += s.EPWait.Seconds() / float64(len(stats))
		}
		rep.epWaits, rep.epSoFar = append(rep.epWaits, ew-rep.epSoFar), ew
		var cur, d [3]float64
		for _, s := range stats {
			cur[0] += s.Compute.Seconds() / float64(len(stats))
			cur[1] += s.Bubble.Seconds() / float64(len(stats))
			cur[2] += s.Misc.Seconds() / float64(len(stats))
		}
		for i := range d {
			d[i] = cur[i] - rep.partsSoFar[i]
		}
		rep.parts, rep.partsSoFar = append(rep.parts, d), cur
	}
	if (rep.o.Metrics != nil && r0(rep)) || rep.o.Observer != nil {
		m := metricsLine{Step: done, Loss: res.loss, LR: res.lr, GradNorm: res.norm, TokensPerS: tps, MFU: mfu, StepS: dt.Seconds(), PredStepS: rep.pred.stepS(), Budget: rep.budget,
			Skipped: res.skipped, LossScale: res.scale, Experts: res.experts}
		if res.skipped {
			m.GradNorm = 0 // it overflowed (not finite, which JSON cannot hold): "skipped" says so
		}
		if finite(val) {
			m.ValLoss = &val
		}
		m.Run, m.Sample = rep.header, rep.lineSample
		for _, s := range stats {
			compute, misc, peer, epw := s.Compute.Seconds(), s.Misc.Seconds(), s.PeerWait.Seconds(), s.EPWait.Seconds()
			m.Ranks = append(m.Ranks, metrics.Rank{Rank: s.Rank, Tags: tagsOf(s.Peak, s.PeakAll), CommBusyS: s.CommBusy.Seconds(), CommWaitS: s.CommWait.Seconds(), RingWaitS: s.RingWait.Seconds(),
				ComputeS: &compute, BubbleS: s.Bubble.Seconds(), MiscS: &misc,
				CommBytes: s.CommBytes, Predicted: rep.pred.rankJSON(s.Rank)})
			if s.PeerWait > 0 {
				m.Ranks[len(m.Ranks)-1].PeerWaitS = &peer
			}
			if s.EPWait > 0 {
				m.Ranks[len(m.Ranks)-1].EPWaitS = &epw
			}
		}
		// Every field is finite here (runStep stops at a non-finite loss
		// or norm), so a line is never lost to an encoding error; if one
		// were, no partial line is written.
		if b, err := json.Marshal(m); err == nil {
			if rep.o.Metrics != nil && r0(rep) {
				if _, err := fmt.Fprintf(rep.o.Metrics, "%s\n", b); err != nil && rep.metricsErr == nil {
					rep.metricsErr = err
					rep.o.Log.Error("metrics: cannot write; training goes on without them", "step", done, "err", err)
				}
			}
			if rep.o.Observer != nil {
				rep.o.Observer.Step(b)
			}
			rep.header = nil // the run's first line carries it
		}
	}
	if rep.bar != nil {
		d := fmt.Sprintf("loss %.3f", res.loss)
		if !math.IsNaN(val) {
			d += fmt.Sprintf(" val %.3f", val)
		}
		rep.bar.Describe(fmt.Sprintf("%s  %.0f tok/s  MFU %.1f%%", d, tps, 100*mfu))
		rep.bar.Add(1)
		if !math.IsNaN(val) {
			rep.bar.Clear()
			fmt.Fprintf(rep.o.Progress, "step %d: loss %.4f, val %.4f\n", done, res.loss, val)
		}
		return
	}
	if le := rep.o.Job.Train.LogEvery; !math.IsNaN(val) || le == 0 || done%le == 0 || done == 1 {
		args := []any{"step", done, "loss", round4(res.loss), "lr", sig4(res.lr), "grad_norm", round4(res.norm),
			"tokens_per_s", math.Round(tps), "mfu", round4(mfu)}
		if !math.IsNaN(val) {
			args = append(args, "val_loss", round4(val))
		}
		if res.skipped {
			args = append(args, "skipped", true, "loss_scale", res.scale)
		}
		if res.experts != nil {
			args = append(args, "aux_loss", round4(res.experts.AuxLoss))
		}
		rep.o.Log.Info("step", args...)
	}
}

// r0 reports whether this reporter is rank 0's, the only one writing
// --metrics (a node's local rank 0 elsewhere reports on its terminal).
func r0(rep *reporter) bool { return rep.o.World == nil || rep.o.World.Rank() == 0 }

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// sig4 is x to 4 significant digits (a learning rate such as
// 0.00026850842073984193 logs as 0.0002685).
func sig4(x float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	if err != nil {
		return x
	}
	return v
}

func (rep *reporter) sample(done int, txt string) {
	if !rep.on {
		return
	}
	if rep.bar != nil {
		rep.bar.Clear()
	}
	fmt.Fprintf(rep.o.Out, "--- sample at step %d ---\n%s%s\n---\n", done, rep.o.Job.Train.Prompt, txt)
	if rep.o.Observer != nil {
		rep.o.Observer.Sample(done, rep.o.Job.Train.Prompt+txt)
	}
}

func (rep *reporter) saved(done int, dir string) {
	if rep.on {
		rep.o.Log.Info("checkpoint", "step", done, "dir", dir)
	}
}

func (rep *reporter) finish(s *Summary) {
	if !rep.on {
		return
	}
	if rep.bar != nil {
		rep.bar.Finish()
	}
	s.TokensPerSec, s.MFU, s.Peak = median(rep.tps), median(rep.mfu), rep.peakSrc
	s.SkippedSteps, s.LossScale = rep.skipped, rep.scale
	s.Experts = rep.experts
	s.StepSeconds, s.ExposedSeconds, s.Prediction = medianDur(rep.steps), median(rep.exposed), rep.pred
	s.RingSeconds = median(rep.ring)
	s.EPSeconds = median(rep.epWaits)
	for i, p := range []*float64{&s.ComputeSeconds, &s.BubbleSeconds, &s.MiscSeconds} {
		xs := make([]float64, len(rep.parts))
		for k, d := range rep.parts {
			xs[k] = d[i]
		}
		*p = median(xs)
	}
	WriteSummary(rep.o.Out, s)
}

// WriteSummary prints the end-of-run table: memory peaks per tag and
// communication per rank, then throughput.
func WriteSummary(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "\nplan %s: steps %d..%d, loss %.4f", s.Plan, s.FirstStep, s.LastStep, s.Loss)
	if !math.IsNaN(s.ValLoss) {
		fmt.Fprintf(w, ", val %.4f", s.ValLoss)
	}
	fmt.Fprintf(w, ", %.0f tokens/s, MFU %.1f%% (medians)\n", s.TokensPerSec, 100*s.MFU)
	if s.Peak != "" {
		fmt.Fprintf(w, "MFU is against %s\n", s.Peak)
	}
	if s.SkippedSteps > 0 {
		fmt.Fprintf(w, "fp16: %d of %d steps skipped (their gradients overflowed; the weights did not change); the last step ran at loss scale %g\n",
			s.SkippedSteps, s.LastStep-s.FirstStep, s.LossScale)
	}
	writeExperts(w, s.Experts)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"rank"}
	for _, t := range device.Tags() {
		hdr = append(hdr, t.String())
	}
	hdr = append(hdr, "peak", "comm total", "comm exposed", "")
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	for _, r := range s.Ranks {
		row := []string{fmt.Sprint(r.Rank)}
		for _, t := range device.Tags() {
			row = append(row, device.FormatBytes(r.Peak[t]))
		}
		row = append(row, device.FormatBytes(r.PeakAll), fmtDur(r.CommBusy), fmtDur(r.CommWait), "")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	fmt.Fprintln(w, "\ncomm total: time the rank's collectives were in flight (from when each could start to its end);")
	fmt.Fprintln(w, "comm exposed: the part of it the rank's computation waited for (at most the total; the rest overlapped compute)")
	writePrediction(w, s)
	if s.Checkpoint != "" {
		fmt.Fprintf(w, "\ncheckpoint: %s\n", s.Checkpoint)
	}
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// writeExperts prints an MoE model's routing over the last step: per MoE
// block the fewest and most assignments an expert got, their ratio to the
// mean (1 is balanced) and the dropped ones, then the aux loss.
func writeExperts(w io.Writer, e *metrics.Experts) {
	if e == nil || len(e.Layers) == 0 {
		return
	}
	fmt.Fprintf(w, "experts over the last step (assignments per expert; aux loss %.4g):\n", e.AuxLoss)
	for i, l := range e.Layers {
		lo, hi, sum, drop := e.Load[i][0], e.Load[i][0], int64(0), int64(0)
		for k, n := range e.Load[i] {
			lo, hi, sum, drop = min(lo, n), max(hi, n), sum+n, drop+e.Dropped[i][k]
		}
		mean := float64(sum) / float64(len(e.Load[i]))
		ratio := 0.0
		if mean > 0 {
			ratio = float64(hi) / mean
		}
		fmt.Fprintf(w, "  block %d: %d..%d (max/mean %.2f), %d of %d dropped", l, lo, hi, ratio, drop, sum)
		if i < len(e.RecvRowsMax) {
			fmt.Fprintf(w, ", at most %d rows on a rank", e.RecvRowsMax[i])
		}
		if i < len(e.Bias) && len(e.Bias[i]) > 0 {
			bl, bh := slices.Min(e.Bias[i]), slices.Max(e.Bias[i])
			fmt.Fprintf(w, ", expert bias %.4g..%.4g", bl, bh)
		}
		fmt.Fprintln(w)
	}
}
