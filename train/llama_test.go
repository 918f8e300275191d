package train

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"trellis/checkpoint"
	"trellis/model"
)

// llamaJob trains a tiny Llama on the embedded novel under plan: widths
// that are not powers of two (hidden 48, SwiGLU 40, 12 tokens, a
// vocabulary of 259, padded under tp = 2), grouped-query attention (6
// query heads on 2 key/value heads: tp = 2 keeps one key/value head and
// its 3 query heads per rank), RoPE with θ = 500, the untied head, and
// dropout on (Trellis's residual-branch and embedding dropout; Llama
// itself has none), so that every mechanism of the block is exercised.
func llamaJob(plan string, layers int) Job {
	j := tinyJob(plan)
	j.Model = model.Config{Arch: "llama", Layers: layers, Hidden: 48, Heads: 6, KVHeads: 2, FFN: 40, SeqLen: 12, Vocab: 259,
		Dropout: 0.1, RopeTheta: 500}
	return j
}

// llamaPlans are the fp32 plans of TestLlamaPlansMatchSingleDevice, each
// with its number of blocks (3 and 5: uneven pipeline splits, 2+1 and
// 3+2, or 2+1+1+1 over four interleaved chunks): dp with ZeRO 0-3, tp ±
// sp, pp with every schedule, 3D, flash, selective and full
// recomputation, and their products.
var llamaPlans = []struct {
	plan   string
	layers int
}{
	{"dp=2", 3}, {"dp=2,zero=1", 3}, {"dp=2,zero=2", 3}, {"dp=4,zero=3", 3},
	{"tp=2", 3}, {"tp=2,sp=on", 3}, {"dp=2,tp=2,sp=on,zero=3", 3},
	{"pp=2", 3}, {"pp=2,schedule=gpipe", 3}, {"pp=2,schedule=zb-h1", 3}, {"pp=2,vpp=2,schedule=interleaved", 5}, {"pp=3", 5},
	{"pp=2,tp=2,dp=2,zero=1", 3}, {"pp=2,tp=2,sp=on,schedule=zb-h1", 3}, {"dp=2,pp=2,zero=3,schedule=interleaved,vpp=2", 5},
	{"flash=on", 3}, {"tp=2,flash=on", 3}, {"pp=2,flash=on", 3},
	{"recompute=selective", 3}, {"recompute=full", 3}, {"tp=2,sp=on,recompute=selective", 3},
	{"dp=2,zero=3,recompute=full,flash=on", 3}, {"pp=2,schedule=zb-h1,recompute=full", 3}, {"tp=2,flash=on,recompute=full", 3},
}

// Every plan of llamaPlans trains the single device's Llama: per-step
// losses and gradient norms within 1e-5 relative over 5 steps, final
// weights and Adam moments within 1e-5 relative L2 (compareRuns).
func TestLlamaPlansMatchSingleDevice(t *testing.T) {
	refs := map[int]result{}
	for _, tc := range llamaPlans {
		t.Run(fmt.Sprintf("%s/L%d", tc.plan, tc.layers), func(t *testing.T) {
			ref, ok := refs[tc.layers]
			if !ok {
				ref = runJob(t, llamaJob("dp=1", tc.layers), t.TempDir(), "", 0)
				if ref.losses[len(ref.losses)-1] >= ref.losses[0] {
					t.Fatalf("the reference does not learn: losses %v", ref.losses)
				}
				refs[tc.layers] = ref
			}
			j := llamaJob(tc.plan, tc.layers)
			got := runJob(t, j, t.TempDir(), "", 0)
			s, err := j.resolve()
			if err != nil || len(got.sum.Ranks) != s.ranks {
				t.Fatalf("%d ranks reported (%v), want the plan's %d", len(got.sum.Ranks), err, s.ranks)
			}
			compareRuns(t, got, ref)
		})
	}
}

// The 16-bit Llama: bf16 and fp16 under tp ± sp, pipelines (zero-bubble,
// interleaved), 3D and ZeRO-3 with selective recomputation equal the
// single device's 16-bit run: per-step losses within the GPT-2 bound
// (halfParLoss), the gradient norms and final state within
// llamaHalfNorm and llamaHalfState; they track the fp32 run within
// TestBF16TracksFP32's 3% per step, and a plan run twice is
// bit-identical. The lr is 1e-3 (GPT-2's test runs 3e-3).
//
// Why the norms have a bound of their own: one pass of every Llama plan
// computes the single device's 16-bit gradients within GPT-2's
// halfPartBounds (parallel/tp's TestHalfPartsMatchOneDevice, Llama cases),
// and fp32 plans match within 1e-7; what differs is where an fp32
// reduction's last ulp meets a 16-bit rounding boundary. Llama's training
// trajectory amplifies those flips more than GPT-2's does (measured at
// the same widths, bf16 tp=2, lr 3e-3: GPT-2's norms 4.7e-5 from one
// device, Llama's 1.5e-2, its losses 3.9e-5; an untied head and
// multi-head attention are the most sensitive): AdamW's first steps move
// every weight by ±lr whatever its gradient's size, so a flipped sign of
// a small gradient is a whole step. Measured at lr 1e-3 over the plans
// below: losses 2.3e-5, norms 6.6e-4, weights 2.7e-4, moments 2.1e-3
// (bf16 tp=2 and 3D the worst; pipelines without tp 1e-5 or bit for
// bit). The bounds leave a factor 5; a wrong product or a missing
// reduction moves the first step's loss by far more.
const (
	llamaHalfNorm  = 4e-3
	llamaHalfState = 1e-2
)

func TestLlamaHalfPrecisionPlans(t *testing.T) {
	plans := []string{"tp=2", "tp=2,sp=on", "pp=2,schedule=zb-h1", "pp=2,vpp=2,schedule=interleaved", "pp=2,tp=2,dp=2,zero=1", "dp=2,zero=3,recompute=selective"}
	job := func(p string) Job {
		j := llamaJob(p, 4)
		j.Train.LR, j.Train.MinLR = 1e-3, 1e-4
		return j
	}
	for _, prec := range []string{"bf16", "fp16"} {
		ref := runJob(t, job("precision="+prec), t.TempDir(), "", 0)
		for i, p := range plans {
			t.Run(prec+"/"+p, func(t *testing.T) {
				j := job(p + ",precision=" + prec)
				a := runJob(t, j, t.TempDir(), "", 0)
				if i == 0 {
					b := runJob(t, j, t.TempDir(), "", 0)
					for s := range a.losses {
						if a.losses[s] != b.losses[s] || a.norms[s] != b.norms[s] {
							t.Errorf("step %d: not bit-identical across two runs", s+1)
						}
					}
				}
				tracks(t, prec, runJob(t, job(p), "", "", 0), a)
				llamaHalfClose(t, a, ref)
			})
		}
	}
}

// llamaHalfClose holds got to ref: losses within halfParLoss, gradient
// norms within llamaHalfNorm, weights and moments within llamaHalfState
// in relative L2.
func llamaHalfClose(t *testing.T, got, ref result) {
	t.Helper()
	if len(got.losses) != len(ref.losses) || len(ref.losses) < 5 {
		t.Fatalf("%d steps logged, want %d (at least 5)", len(got.losses), len(ref.losses))
	}
	var wl, wn float64
	for s := range ref.losses {
		l := math.Abs(got.losses[s]-ref.losses[s]) / ref.losses[s]
		n := math.Abs(got.norms[s]-ref.norms[s]) / ref.norms[s]
		wl, wn = max(wl, l), max(wn, n)
		if !(l <= halfParLoss) || !(n <= llamaHalfNorm) {
			t.Errorf("step %d: loss %.9g vs %.9g (%.3g), norm %.9g vs %.9g (%.3g)", s+1, got.losses[s], ref.losses[s], l, got.norms[s], ref.norms[s], n)
		}
	}
	for _, x := range []struct {
		what      string
		got, want []float32
	}{{"weights", got.w, ref.w}, {"first moments", got.m, ref.m}, {"second moments", got.v, ref.v}} {
		if e := relL2(x.got, x.want); !(e <= llamaHalfState) {
			t.Errorf("%s: relative L2 error %.3g > %g", x.what, e, llamaHalfState)
		} else {
			t.Logf("%s: relative L2 %.3g", x.what, e)
		}
	}
	t.Logf("worst relative difference: losses %.3g, norms %.3g", wl, wn)
}

// llamaReshardPlans: a checkpoint of each resumes under each other.
var llamaReshardPlans = []string{"dp=1", "dp=2,zero=3", "tp=2", "pp=2,tp=2,sp=on,schedule=zb-h1", "pp=2,vpp=2,schedule=interleaved,dp=2,zero=1"}

// A Llama checkpointed at step 2 under each plan resumes under each of
// the others (the untied head's N-d slices included): the next 5 losses
// match the uninterrupted run under the new plan within 1e-5 relative,
// bit for bit under the same plan.
func TestLlamaReshard(t *testing.T) {
	job := func(p string) Job {
		j := llamaJob(p, 4)
		j.Train.Steps = 7
		return j
	}
	straight, ckpt := map[string]result{}, map[string]string{}
	for _, p := range llamaReshardPlans {
		j := job(p)
		dir := t.TempDir()
		j.Checkpoint = checkpoint.Config{Dir: dir, Every: 2}
		straight[p] = runJob(t, j, "", "", 0)
		ckpt[p] = filepath.Join(dir, checkpoint.StepName(2))
	}
	for _, from := range llamaReshardPlans {
		for _, to := range llamaReshardPlans {
			t.Run(from+"→"+to, func(t *testing.T) {
				t.Parallel()
				got := runJob(t, job(to), "", ckpt[from], 0)
				want := straight[to].losses[2:]
				if len(got.losses) != len(want) {
					t.Fatalf("%d steps after resuming, want %d", len(got.losses), len(want))
				}
				for s, w := range want {
					g := got.losses[s]
					if (from == to && g != w) || math.Abs(g-w) > 1e-5*math.Abs(w) {
						t.Errorf("step %d: loss %.9g, uninterrupted %.9g", s+3, g, w)
					}
				}
			})
		}
	}
}

// llamaMemoryGrid is the Llama plans whose predicted memory
// TestLlamaPredictedMemory holds to the measured (holdPredicted: every
// rank's peak and every tag within 5%).
var llamaMemoryGrid = []string{
	"dp=1", "dp=2,zero=1", "dp=2,zero=2", "dp=4,zero=3", "tp=2", "tp=2,sp=on", "dp=2,tp=2,zero=3",
	"pp=2", "pp=2,schedule=gpipe", "pp=2,schedule=interleaved,vpp=2", "pp=2,schedule=zb-h1", "pp=2,dp=2,zero=1",
	"dp=1,flash=on", "tp=2,flash=on", "recompute=selective", "tp=2,sp=on,recompute=full",
	"precision=bf16,recompute=selective", "dp=2,zero=1,precision=bf16,recompute=full", "dp=2,zero=3,precision=bf16,flash=on",
	"pp=2,tp=2,dp=2,zero=1,precision=bf16",
	"cp=2,flash=on",
}

// The planner predicts the engine's Llama memory as it does GPT-2's: on
// every plan of llamaMemoryGrid each rank's peak and every tag above 4 KiB
// within 5% of the measured (a pipeline's comm held to its bound), from
// the same declarations of arch the engine carves its stash and scratch by.
func TestLlamaPredictedMemory(t *testing.T) {
	for _, p := range llamaMemoryGrid {
		t.Run(p, func(t *testing.T) {
			j := llamaJob(p, 4)
			j.Model.Dropout = 0
			holdPredicted(t, j)
		})
	}
}

// TestLlamaTiedPlans: a Llama whose head is tied to its embedding (as
// GPT-2's: the pipeline's end stages sum the embedding's gradient) trains
// the single device's model under a pipeline, tensor parallelism and 3D.
func TestLlamaTiedPlans(t *testing.T) {
	tied := func(p string) Job {
		j := llamaJob(p, 3)
		j.Model.TieEmbeddings, j.Model.KVHeads, j.Model.FFN = true, 3, 42
		return j
	}
	ref := runJob(t, tied("dp=1"), t.TempDir(), "", 0)
	for _, p := range []string{"pp=2", "tp=3,dp=2,zero=2", "pp=2,tp=3,sp=on,schedule=zb-h1"} {
		t.Run(p, func(t *testing.T) {
			compareRuns(t, runJob(t, tied(p), t.TempDir(), "", 0), ref)
		})
	}
}
