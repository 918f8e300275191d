package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"trellis/checkpoint"
)

// cancelAfter is a metrics writer that calls cancel after n lines (closing
// Options.Stop, as a Ctrl-C during step n would), and keeps the lines.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
	buf    bytes.Buffer
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.buf.Write(p)
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return len(p), nil
}

// metricLosses decodes metrics lines into step → loss, failing on any line
// that is not a JSON object and on a repeated step.
func metricLosses(t *testing.T, b []byte) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m metricsLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		if _, dup := out[m.Step]; dup {
			t.Fatalf("step %d logged twice", m.Step)
		}
		out[m.Step] = m.Loss
	}
	return out
}

// A closed Options.Stop (Ctrl-C) stops every rank at the same step boundary,
// the first after the cancellation (here: during step 3's report, so after
// step 4), with a checkpoint there; resuming from it finishes the run bit
// for bit as an uninterrupted one.
func TestInterruptCheckpointsAndResumes(t *testing.T) {
	j := tinyJob("dp=2,zero=2")
	j.Train.Steps = 6
	straight := runJob(t, j, t.TempDir(), "", 0)

	dir := filepath.Join(t.TempDir(), "ck")
	j.Checkpoint = checkpoint.Config{Dir: dir, Keep: 1}
	stop := make(chan struct{})
	m := &cancelAfter{n: 3, cancel: func() { close(stop) }}
	_, err := Run(context.Background(), Options{Job: j, Metrics: m, Stop: stop})
	var intr *Interrupted
	if !errors.As(err, &intr) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want *Interrupted", err)
	}
	want := filepath.Join(dir, "step-00000004")
	if intr.Step != 4 || intr.Checkpoint != want || !strings.Contains(err.Error(), want) {
		t.Fatalf("interrupted at step %d, checkpoint %q (%v); want step 4, %s", intr.Step, intr.Checkpoint, err, want)
	}
	resumed := runJob(t, j, dir, dir, 0)
	got := metricLosses(t, m.buf.Bytes())
	for i, l := range resumed.losses {
		got[5+i] = l
	}
	for s := 1; s <= 6; s++ {
		if got[s] != straight.losses[s-1] {
			t.Errorf("step %d: loss %v after the interruption, %v straight", s, got[s], straight.losses[s-1])
		}
	}
	if err := sameBits(resumed.w, straight.w); err != nil {
		t.Errorf("final weights: %v", err)
	}
}

// A step whose loss or gradient norm is not finite stops the run with an
// error naming the step; the last good checkpoint stays the latest, no
// partial directory is left, and every metrics line is valid JSON.
func TestDivergedRunStopsAndKeepsLastCheckpoint(t *testing.T) {
	j := tinyJob("dp=2,zero=1")
	j.Train.Steps, j.Train.Warmup = 20, 0
	j.Train.LR, j.Train.MinLR = 1e30, 0
	dir := filepath.Join(t.TempDir(), "ck")
	j.Checkpoint = checkpoint.Config{Dir: dir, Every: 1, Keep: 0}
	var metrics bytes.Buffer
	_, err := Run(context.Background(), Options{Job: j, Metrics: &metrics})
	var d *Diverged
	if !errors.As(err, &d) {
		t.Fatalf("error %v, want *Diverged", err)
	}
	if d.Step < 2 || finite(d.Loss) && finite(d.GradNorm) {
		t.Fatalf("diverged at step %d with loss %v, norm %v", d.Step, d.Loss, d.GradNorm)
	}
	good := filepath.Join(dir, checkpoint.StepName(d.Step-1))
	if d.LastGood != good || !strings.Contains(err.Error(), "step "+strconv.Itoa(d.Step)) || strings.HasPrefix(err.Error(), "rank") {
		t.Errorf("error %q: want it to name step %d and %s, once", err, d.Step, good)
	}
	latest, err := checkpoint.Latest(dir)
	if err != nil || latest != good {
		t.Errorf("latest is %q (%v), want %s", latest, err, good)
	}
	if _, err := checkpoint.Open(good); err != nil {
		t.Errorf("the last good checkpoint: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".partial") {
			t.Errorf("left %s", e.Name())
		}
	}
	if n := len(metricLosses(t, metrics.Bytes())); n != d.Step-1 {
		t.Errorf("%d metrics lines, want %d (every finished step)", n, d.Step-1)
	}
}

// Every output path is checked before step 1, and so are values that
// would only fail (or silently do nothing) later.
func TestOutputsCheckedBeforeStepOne(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "afile")
	os.WriteFile(file, []byte("x"), 0o644)
	cases := []struct {
		name string
		edit func(*Job)
		want string
	}{
		{"dir is a file", func(j *Job) { j.Checkpoint.Dir = file }, "is a file"},
		{"dir under a file", func(j *Job) { j.Checkpoint.Dir = filepath.Join(file, "ck") }, "cannot be created"},
		{"every without dir", func(j *Job) { j.Checkpoint = checkpoint.Config{Every: 5} }, "dir must be set"},
		{"grad_clip NaN", func(j *Job) { j.Train.GradClip = math.NaN() }, "train.grad_clip"},
		{"lr Inf", func(j *Job) { j.Train.LR = math.Inf(1) }, "train.lr"},
		{"prompt outside the vocabulary", func(j *Job) {
			j.Data.Source, j.Data.Tokenizer, j.Train.SampleEvery = "synthetic", "gpt2", 0
		}, "train.prompt"},
		{"repeated plan key", func(j *Job) { j.Parallel.Plan = "dp=2,dp=4" }, `"dp" given twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := tinyJob("dp=1")
			c.edit(&j)
			var metrics bytes.Buffer
			_, err := Run(context.Background(), Options{Job: j, Metrics: &metrics})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
			if metrics.Len() > 0 {
				t.Errorf("ran a step before failing: %s", metrics.String())
			}
		})
	}
}

// The rules of claimDir: who may write into a checkpoint directory.
func TestClaimDirRules(t *testing.T) {
	owner := checkpoint.Run{ID: "aaaa"}
	cases := []struct {
		name     string
		steps    []int
		owned    bool
		id       string
		from     int
		sameRoot bool
		want     string // "": allowed
	}{
		{"fresh into an empty dir", nil, true, "bbbb", -1, false, ""},
		{"fresh into a dir with steps", []int{10}, true, "bbbb", -1, false, "holds the checkpoints of run aaaa"},
		{"fresh into an unowned dir with steps", []int{10}, false, "bbbb", -1, false, "another run"},
		{"resume the latest", []int{5, 10}, true, "aaaa", 10, true, ""},
		{"resume into a dir behind it", []int{5}, true, "aaaa", 10, false, ""},
		{"resume into another run's dir", []int{10}, true, "bbbb", 10, false, "belongs to run aaaa"},
		{"resume into an unidentified dir", []int{10}, false, "aaaa", 10, false, "unidentified"},
		{"resume an old checkpoint in place", []int{10}, false, "aaaa", 10, true, ""},
		{"fork behind the latest", []int{10, 20}, true, "aaaa", 10, true, "already holds step 20"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := claim{dir: "ck", steps: c.steps, owner: owner, owned: c.owned, id: c.id, from: c.from, sameRoot: c.sameRoot}
			err := cl.check()
			if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// train.warmup longer than the run is clamped; a plan's mbs sets the
// micro-batch; a resumed run may extend train.steps.
func TestRoughEdges(t *testing.T) {
	j := tinyJob("dp=2,mbs=1")
	j.Train.Steps, j.Train.Warmup = 2, 40
	dir := t.TempDir()
	r := runJob(t, j, dir, "", 0)
	if len(r.losses) != 2 {
		t.Fatalf("%d steps", len(r.losses))
	}
	m, err := LoadMeta(dir)
	if err != nil || m.Job.Train.MicroBatch != 1 {
		t.Fatalf("micro_batch in the checkpoint: %d (%v), want the plan's mbs=1", m.Job.Train.MicroBatch, err)
	}
	j.Train.Steps = 4
	r = runJob(t, j, dir, dir, 0)
	if len(r.losses) != 2 || r.sum.LastStep != 4 {
		t.Errorf("extended run: %d steps, last %d", len(r.losses), r.sum.LastStep)
	}
}

// Samples draw from the ids both the model and the tokenizer know, for
// every data source: synthetic data with GPT-2's tokenizer and a 256-entry
// vocabulary, and byte-level text with fewer than 256 entries refused.
func TestVocabularyEveryDataSource(t *testing.T) {
	j := tinyJob("dp=1")
	j.Data.Source, j.Data.Tokenizer = "synthetic", "gpt2"
	j.Train.Steps, j.Train.SampleEvery, j.Train.SampleLen, j.Train.Prompt = 2, 0, 20, ""
	var out bytes.Buffer
	if _, err := Run(context.Background(), Options{Job: j, Out: &out}); err != nil {
		t.Fatalf("synthetic + gpt2 + vocab 256: %v", err)
	}
	j = tinyJob("dp=1")
	j.Model.Vocab = 250
	if err := j.Check(); err == nil || !strings.Contains(err.Error(), "vocab=250") {
		t.Errorf("byte tokenizer with vocab 250: %v, want a refusal naming vocab=250", err)
	}
	j.Data.Source, j.Train.SampleEvery, j.Train.Prompt, j.Train.Steps = "synthetic", 0, "ab", 1
	if _, err := Run(context.Background(), Options{Job: j}); err != nil {
		t.Errorf("synthetic, byte tokenizer, vocab 250: %v", err)
	}
}

// Exposed communication is a part of the total, whatever the plan and
// overlap: the table's two columns are consistent by construction.
func TestCommExposedWithinTotal(t *testing.T) {
	for _, c := range []struct {
		plan    string
		overlap bool
	}{{"dp=2", false}, {"dp=2", true}, {"dp=2,zero=3", false}, {"dp=2,zero=3", true}} {
		j := tinyJob(c.plan)
		j.Parallel.Overlap = c.overlap
		sum, err := Run(context.Background(), Options{Job: j})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range sum.Ranks {
			if r.CommWait > r.CommBusy || r.CommBusy <= 0 {
				t.Errorf("%s overlap=%v rank %d: exposed %v, total %v", c.plan, c.overlap, r.Rank, r.CommWait, r.CommBusy)
			}
		}
	}
}
