package train

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"trellis/device"
	"trellis/parallel/pp"
	"trellis/plan"
)

// ppJob is tinyJob with layers blocks and dropout on.
func ppJob(parallel string, layers int) Job {
	j := tinyJob(parallel)
	j.Model.Layers, j.Model.Dropout = layers, 0.1
	return j
}

// Every schedule the engine runs, pp ∈ {2, 4} (vpp 2 for interleaved) with
// uneven splits, and pp=2 × dp=2 with ZeRO 0 and 1, trains the single
// device's model: per-step losses within 1e-5 relative over 5 steps (with
// dropout), final weights and moments within 1e-5 relative L2. The
// checkpoints are read back as one device reads them (by tensor name).
func TestPipelinesMatchSingleDevice(t *testing.T) {
	refs := map[int]result{}
	for _, tc := range []struct {
		plan   string
		layers int
	}{
		{"pp=2,schedule=gpipe", 5},
		{"pp=4,schedule=gpipe", 6},
		{"pp=2,schedule=1f1b", 5},
		{"pp=4,schedule=1f1b", 6},
		{"pp=2,vpp=2,schedule=interleaved", 5},
		{"pp=4,vpp=2,schedule=interleaved", 9},
		{"pp=2,dp=2,zero=1", 5},
		{"pp=2,dp=2", 5},
		{"pp=2,schedule=zb-h1", 5},
		{"pp=4,schedule=zb-h1", 6},
		// DualPipeV needs m ≥ 2pp: 4 micro-batches of 2 at pp=2, 8 of 1 at pp=4.
		{"pp=2,schedule=dualpipev", 5},
		{"pp=4,schedule=dualpipev", 9},
	} {
		t.Run(fmt.Sprintf("%s/L%d", tc.plan, tc.layers), func(t *testing.T) {
			skipUnknownSchedule(t, tc.plan)
			mbs := 2
			if strings.Contains(tc.plan, "pp=4,schedule=dualpipev") {
				mbs = 1
			}
			key := tc.layers*10 + mbs
			ref, ok := refs[key]
			if !ok {
				rj := ppJob("dp=1", tc.layers)
				rj.Train.MicroBatch = mbs
				ref = runJob(t, rj, t.TempDir(), "", 0)
				refs[key] = ref
			}
			j := ppJob(tc.plan, tc.layers)
			j.Train.MicroBatch = mbs
			got := runJob(t, j, t.TempDir(), "", 0)
			set, err := j.resolve()
			if err != nil || len(got.sum.Ranks) != set.ranks || set.enginePlan.PP < 2 {
				t.Fatalf("%d ranks reported (%v), want the plan's %d with pp > 1", len(got.sum.Ranks), err, set.ranks)
			}
			if len(got.losses) != len(ref.losses) {
				t.Fatalf("%d steps logged, want %d", len(got.losses), len(ref.losses))
			}
			for s := range ref.losses {
				if math.Abs(got.losses[s]-ref.losses[s]) > 1e-5*ref.losses[s] {
					t.Errorf("step %d: loss %.9g, want %.9g", s+1, got.losses[s], ref.losses[s])
				}
			}
			// Validation reads other batches per data-parallel rank: compare dp=1.
			if v, w := got.sum.ValLoss, ref.sum.ValLoss; set.enginePlan.DP == 1 && (math.IsNaN(w) || !(math.Abs(v-w) <= 1e-5*w)) {
				t.Errorf("validation loss %.9g through the pipeline, %.9g on one device", v, w)
			}
			for _, x := range []struct {
				what      string
				got, want []float32
			}{{"weights", got.w, ref.w}, {"first moments", got.m, ref.m}, {"second moments", got.v, ref.v}} {
				if e := relL2(x.got, x.want); !(e <= 1e-5) {
					t.Errorf("%s: relative L2 error %.3g", x.what, e)
				}
			}
		})
	}
}

// skipUnknownSchedule skips a plan whose schedule plan's key does not
// accept yet (zb-h1 arrives with the planner's change; parallel/pp's
// executor tests cover it meanwhile).
func skipUnknownSchedule(t *testing.T, parallel string) {
	t.Helper()
	if _, err := ppJob(parallel, 8).EnginePlan(); err != nil && strings.Contains(err.Error(), "zb-h1") {
		t.Skipf("plan does not accept schedule=zb-h1 yet: %v", err)
	}
}

// The same pipeline twice gives the same bits: losses and final state.
func TestPipelineBitIdentical(t *testing.T) {
	j := ppJob("pp=2,dp=2,zero=1", 5)
	a := runJob(t, j, t.TempDir(), "", 0)
	b := runJob(t, j, t.TempDir(), "", 0)
	for s := range a.losses {
		if a.losses[s] != b.losses[s] {
			t.Errorf("step %d: %v vs %v", s+1, a.losses[s], b.losses[s])
		}
	}
	for _, x := range [][2][]float32{{a.w, b.w}, {a.m, b.m}, {a.v, b.v}} {
		if err := sameBits(x[0], x[1]); err != nil {
			t.Error(err)
		}
	}
}

// Each stage's measured act peak is the micro-batches the schedule keeps
// in flight on it over all its chunks (pp.Simulate's InFlight: GPipe m,
// 1F1B p−r, which the simulator verifies), each in a stash of the rank's
// largest chunk, plus on the last stage the head stashes between F and B
// (m for GPipe, else 1), plus the two token buffers every rank holds.
func TestPipelineActivationPeaks(t *testing.T) {
	for _, tc := range []struct {
		plan   string
		layers int
		kind   pp.Kind
		pp     int
		vpp    int
	}{
		{"pp=4,schedule=gpipe", 6, pp.GPipe, 4, 1},
		{"pp=4,schedule=1f1b", 6, pp.OneFOneB, 4, 1},
		{"pp=2,vpp=2,schedule=interleaved", 5, pp.Interleaved, 2, 2},
		{"pp=4,vpp=2,schedule=interleaved", 9, pp.Interleaved, 4, 2},
	} {
		t.Run(tc.plan, func(t *testing.T) {
			j := ppJob(tc.plan, tc.layers)
			j.Train.MicroBatch, j.Train.EvalBatches = 1, 0 // 8 micro-batches: in flight < m for 1f1b
			got := runJob(t, j, "", "", 0)
			c := pp.Config{Kind: tc.kind, PP: tc.pp, VPP: tc.vpp, Micro: j.Train.GlobalBatch / j.Train.MicroBatch}
			s, err := pp.Build(c)
			if err != nil {
				t.Fatal(err)
			}
			sim, err := pp.Simulate(s, pp.Unit)
			if err != nil {
				t.Fatal(err)
			}
			counts, err := plan.ChunkLayers(tc.layers, tc.pp, tc.vpp)
			if err != nil {
				t.Fatal(err)
			}
			tokens := 2 * int64(j.Train.MicroBatch*j.Model.SeqLen) * 4
			for _, rs := range got.sum.Ranks {
				r := rs.Rank
				largest := 0
				for st, n := range counts {
					if st%tc.pp == r {
						largest = max(largest, n)
					}
				}
				want := tokens + int64(sim.InFlight[r])*stashBytes(j, largest)
				if r == tc.pp-1 {
					heads := int64(1)
					if tc.kind == pp.GPipe {
						heads = int64(c.Micro)
					}
					want += heads * headBytes(j)
				}
				if tc.vpp == 1 && sim.ChunkInFlight[r][0] != pp.PeakInFlight(c, r) {
					t.Fatalf("rank %d: simulated %d in flight, formula %d", r, sim.ChunkInFlight[r][0], pp.PeakInFlight(c, r))
				}
				if act := rs.Peak[device.Act]; act != want {
					t.Errorf("rank %d: act peak %d bytes, want %d (in flight %d)", r, act, want, sim.InFlight[r])
				}
			}
		})
	}
}

// stashBytes is model.GPT.StageStashBytes of n blocks without the head
// for j's model: n+1 residual streams, n blocks, the token ids.
func stashBytes(j Job, n int) int64 {
	c := j.Model
	B, T, C := int64(j.Train.MicroBatch), int64(c.SeqLen), int64(c.Hidden)
	BT, BTC := B*T, B*T*C
	k := int64(n)
	f := (k+1)*BTC + k*(15*BTC+4*BT+B*int64(c.Heads)*T*T)
	return f*4 + 2*BT*4
}

// headBytes is model.GPT.HeadStashFloats in bytes for j's model: ln_f and
// its statistics, the probabilities, the losses.
func headBytes(j Job) int64 {
	c := j.Model
	BT := int64(j.Train.MicroBatch) * int64(c.SeqLen)
	return 4 * (BT*int64(c.Hidden) + 2*BT + BT*int64(c.Vocab) + BT)
}

// Bad pipelines fail before any rank starts, in one line naming the numbers.
func TestPipelineBadInput(t *testing.T) {
	for _, tc := range []struct {
		plan   string
		layers int
		global int
		want   string
	}{
		{"pp=4,vpp=2,schedule=interleaved", 8, 4, "at least pp=4 micro-batches, got 2"},
		{"pp=4,vpp=2,schedule=interleaved", 8, 12, "micro-batches=6 to be a multiple of pp=4"},
		{"pp=4,vpp=2,schedule=interleaved", 7, 8, "layers=7 fewer than pp·vpp = 4·2 = 8"},
		{"pp=2,zero=2,dp=2", 4, 8, "parallel.overlap=false with pp=2 and zero=2"},
	} {
		j := ppJob(tc.plan, tc.layers)
		j.Train.GlobalBatch = tc.global
		j.Parallel.Overlap = false
		_, err := j.resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s L=%d: error %v, want one line with %q", tc.plan, tc.layers, err, tc.want)
		}
	}
	j := ppJob("pp=4", 8)
	j.Parallel.Devices = 2
	if _, err := j.resolve(); err == nil || !strings.Contains(err.Error(), "pp=4 is larger than parallel.devices=2") {
		t.Errorf("pp > devices: %v", err)
	}
}

// A pipeline's checkpoint is one device's: trellis sample reads it, and a
// run split by --until and resumed (under the same plan) equals the
// straight run bit for bit.
func TestPipelineCheckpoint(t *testing.T) {
	j := ppJob("pp=2,dp=2,zero=1,vpp=2,schedule=interleaved", 5)
	j.Train.GlobalBatch, j.Train.Steps = 16, 4
	a := runJob(t, j, t.TempDir(), "", 0)
	dir := t.TempDir()
	b1 := runJob(t, j, dir, "", 2)
	b2 := runJob(t, j, dir, dir, 0)
	got := append(append([]float64{}, b1.losses...), b2.losses...)
	for s := range a.losses {
		if s >= len(got) || got[s] != a.losses[s] {
			t.Fatalf("losses %v (split) vs %v (straight)", got, a.losses)
		}
	}
	for _, x := range [][2][]float32{{a.w, b2.w}, {a.m, b2.m}, {a.v, b2.v}} {
		if err := sameBits(x[0], x[1]); err != nil {
			t.Error(err)
		}
	}
	txt, err := SampleCheckpoint(SampleOptions{Checkpoint: a.sum.Checkpoint, Prompt: "It is", Tokens: 8, Temperature: 0, Seed: 1, Threads: 1})
	if err != nil || txt == "" {
		t.Fatalf("sample from the pipeline's checkpoint: %q, %v", txt, err)
	}
}
