package train

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"trellis/model"
)

// pp3dJob is tpJob (4 heads, 12 tokens, a padded vocabulary of 257) with
// the given blocks and dropout on: with 3 blocks on two stages the split
// is uneven.
func pp3dJob(plan string, layers int) Job {
	j := tpJob(plan, 0.1)
	j.Model.Layers = layers
	return j
}

// Pipeline × tensor × data parallelism with ZeRO-1 (8 ranks), and pipeline
// × tensor with and without sequence parallelism, with dropout on, train
// the single device's model: per-step losses and gradient norms within
// 1e-5 relative over 5 steps, the final weights and Adam moments (read
// back from the checkpoint's N-d slices as one device reads them) within
// 1e-5 relative L2.
func TestPipelineTensorPlansMatchSingleDevice(t *testing.T) {
	refs := map[int]result{}
	for _, tc := range []struct {
		plan   string
		layers int
	}{
		{"pp=2,tp=2,dp=2,zero=1", 3},
		{"pp=2,tp=2,sp=on,dp=2,zero=1", 3},
		{"pp=2,tp=2,schedule=1f1b", 3},
		{"pp=2,tp=2,sp=on,schedule=gpipe", 3},
		{"pp=2,vpp=2,tp=2,sp=on,schedule=interleaved", 4},
	} {
		t.Run(fmt.Sprintf("%s/L%d", tc.plan, tc.layers), func(t *testing.T) {
			ref, ok := refs[tc.layers]
			if !ok {
				ref = runJob(t, pp3dJob("dp=1", tc.layers), t.TempDir(), "", 0)
				refs[tc.layers] = ref
			}
			j := pp3dJob(tc.plan, tc.layers)
			got := runJob(t, j, t.TempDir(), "", 0)
			s, err := j.resolve()
			if err != nil || len(got.sum.Ranks) != s.ranks || s.enginePlan.PP < 2 || s.enginePlan.TP < 2 {
				t.Fatalf("%d ranks reported (%v), want the plan's %d with pp, tp > 1", len(got.sum.Ranks), err, s.ranks)
			}
			for _, r := range got.sum.Ranks {
				if cb := r.CommBytes; cb.TP == 0 || cb.PP == 0 || (cb.DP > 0) != (s.enginePlan.DP > 1) {
					t.Errorf("rank %d: comm_bytes %+v", r.Rank, cb)
				}
			}
			compareRuns(t, got, ref)
		})
	}
}

// compareRuns holds got to ref: losses and norms within 1e-5 relative per
// step, final weights and moments within 1e-5 relative L2.
func compareRuns(t *testing.T, got, ref result) {
	t.Helper()
	if len(got.losses) != len(ref.losses) || len(ref.losses) < 5 {
		t.Fatalf("%d steps logged, want %d (at least 5)", len(got.losses), len(ref.losses))
	}
	for s := range ref.losses {
		if math.Abs(got.losses[s]-ref.losses[s]) > 1e-5*ref.losses[s] {
			t.Errorf("step %d: loss %.9g, want %.9g", s+1, got.losses[s], ref.losses[s])
		}
		if math.Abs(got.norms[s]-ref.norms[s]) > 1e-5*ref.norms[s] {
			t.Errorf("step %d: gradient norm %.9g, want %.9g", s+1, got.norms[s], ref.norms[s])
		}
	}
	for _, x := range []struct {
		what      string
		got, want []float32
	}{{"weights", got.w, ref.w}, {"first moments", got.m, ref.m}, {"second moments", got.v, ref.v}} {
		if e := relL2(x.got, x.want); !(e <= 1e-5) {
			t.Errorf("%s: relative L2 error %.3g", x.what, e)
		}
	}
}

// The 3D plan twice gives the same bits; a run split by --until and
// resumed from its checkpoint (N-d slices of every split tensor) equals
// the straight run bit for bit; trellis sample reads the checkpoint on one
// device.
func TestPipelineTensorBitIdenticalAndResume(t *testing.T) {
	j := pp3dJob("pp=2,tp=2,sp=on,dp=2,zero=1", 3)
	j.Train.Steps = 4
	a := runJob(t, j, t.TempDir(), "", 0)
	a2 := runJob(t, j, t.TempDir(), "", 0)
	dir := t.TempDir()
	b1 := runJob(t, j, dir, "", 2)
	b2 := runJob(t, j, dir, dir, 0)
	split := append(append([]float64{}, b1.losses...), b2.losses...)
	for s := range a.losses {
		if a2.losses[s] != a.losses[s] || s >= len(split) || split[s] != a.losses[s] {
			t.Fatalf("losses %v (straight), %v (again), %v (split and resumed)", a.losses, a2.losses, split)
		}
	}
	for _, b := range []result{a2, b2} {
		for _, x := range [][2][]float32{{a.w, b.w}, {a.m, b.m}, {a.v, b.v}} {
			if err := sameBits(x[0], x[1]); err != nil {
				t.Error(err)
			}
		}
	}
	txt, err := SampleCheckpoint(SampleOptions{Checkpoint: a.sum.Checkpoint, Prompt: "It is", Tokens: 8, Temperature: 0, Seed: 1, Threads: 1})
	if err != nil || txt == "" {
		t.Fatalf("sample from the 3D checkpoint: %q, %v", txt, err)
	}
}

// A 3D plan the model's shape cannot take is refused before any rank
// starts, in one line naming the numbers.
func TestPipelineTensorBadInput(t *testing.T) {
	for _, tc := range []struct{ plan, want string }{
		{"pp=2,tp=3", "tp=3 does not divide model.heads=4"},
	} {
		_, err := pp3dJob(tc.plan, 4).resolve()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q", tc.plan, err, tc.want)
		}
	}
}

// The stages exchange the activations of their tensor-parallel part: with
// sp the sequence-sharded B·T·C/t, half of what they send without it at
// t = 2. A rank's pp bytes are those transfers plus, once per step, the
// tied embedding's gradient all-reduce between the end stages (its local
// wte rows and wpe) and the gradient norm's (two fp32) over the pipeline.
func TestPipelineTensorBoundaryBytes(t *testing.T) {
	p2p := map[bool]int64{}
	for _, sp := range []bool{false, true} {
		plan := "pp=2,tp=2,schedule=1f1b"
		if sp {
			plan += ",sp=on"
		}
		j := pp3dJob(plan, 3)
		got := runJob(t, j, "", "", 0)
		c := j.Model
		tied := int64(len(got.losses)) * 4 * int64(c.PartLayout(model.Part{TP: 2}).Units[0].Size+2)
		for _, r := range got.sum.Ranks {
			b := r.CommBytes.PP - tied
			if r.Rank == 0 {
				p2p[sp] = b
			} else if b != p2p[sp] {
				t.Errorf("sp=%v: rank %d moved %d bytes between stages, rank 0 %d", sp, r.Rank, b, p2p[sp])
			}
		}
	}
	if p2p[true] <= 0 || 2*p2p[true] != p2p[false] {
		t.Errorf("bytes between stages: %d with sp, %d without; want half", p2p[true], p2p[false])
	}
}
