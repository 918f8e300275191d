package train

import (
	"strings"
	"testing"
)

// fp8Job is pp3dJob's model in fp8 under recipe, with blockwise tiles of
// 6 (they divide every tensor-parallel shard of hidden 36 and the 24
// tokens of a micro-batch, as 128 divides a real model's, so every split
// quantises the one device's tiles).
func fp8Job(plan, recipe string) Job {
	j := pp3dJob(plan+",precision=fp8", 4)
	j.Train.FP8Recipe, j.Train.FP8Tile = recipe, 6
	return j
}

// fp8 under tensor parallelism (± sp), a pipeline and ZeRO-1/3 equals its
// own single-device run within the 16-bit plans' bound (halfParLoss,
// halfParState: the fp32 reduction order moves a value next to an fp8
// rounding boundary as it does next to a bf16 one), under both recipes;
// the fp8 run tracks bf16 within 3% a step and is not bf16 (its
// quantisation ran).
func TestFP8ParallelPlans(t *testing.T) {
	bf16 := runJob(t, pp3dJob("precision=bf16", 4), "", "", 0)
	for _, recipe := range []string{"delayed", "blockwise"} {
		ref := runJob(t, fp8Job("dp=1", recipe), t.TempDir(), "", 0)
		tracks(t, "fp8 "+recipe, bf16, ref)
		for _, p := range []string{"tp=2", "tp=2,sp=on", "pp=2,schedule=1f1b", "dp=2,zero=1", "dp=2,zero=3"} {
			t.Run(recipe+"/"+p, func(t *testing.T) {
				closeTo(t, runJob(t, fp8Job(p, recipe), t.TempDir(), "", 0), ref, halfParLoss, halfParState)
			})
		}
	}
}

// In fp8 every rank's peak and every tag above 4 KiB is within 5% of the
// planner's prediction (holdPredicted), under both recipes: the bf16
// states plus the amax histories (param), bf16's stash, and the
// quantised operands' scratch (workspace, arch.FP8).
func TestFP8PredictedMemory(t *testing.T) {
	for _, c := range []struct{ plan, recipe string }{
		{"dp=1", "delayed"}, {"dp=1", "blockwise"}, {"dp=2,zero=3", "delayed"}, {"tp=2,sp=on", "blockwise"},
		{"pp=2", "delayed"}, {"dp=2,zero=1,recompute=selective", "blockwise"},
	} {
		t.Run(c.plan+"/"+c.recipe, func(t *testing.T) {
			j := tinyJob(c.plan + ",precision=fp8")
			j.Model.Layers = 4
			j.Train.FP8Recipe = c.recipe
			holdPredicted(t, j)
		})
	}
}

// A Llama in fp8 (its qkv and gate|up GEMMs have one shape here, so
// delayed scaling gives them one history: the larger amax's scale, on
// every plan alike) equals its single-device fp8 run under pp and ZeRO-3
// (measured 2.5e-8 and 6.6e-8) and, with blockwise tiles of 4 (dividing
// every shard: 24, 40, 20, 8), under tp and 3D within the 16-bit bound.
// Delayed scaling under tp does not meet that bound: the step's amaxes
// and scales are the one device's (the histories agree to the bit
// through step 2), but the fp32 reduction order of the row-parallel
// products moves a value across an fp8 rounding boundary, a step of 2^-3
// (e5m2 gradients) or 2^-4 (e4m3) where bf16's is 2^-8, and the SwiGLU
// product amplifies it: measured 2.9e-3 on the losses and 1.35e-2 on the
// moments over 5 steps (GPT-2: 8.9e-5), held to fp8TPLoss and fp8TPState.
func TestFP8Llama(t *testing.T) {
	for _, recipe := range []string{"delayed", "blockwise"} {
		job := func(p string) Job {
			j := llamaJob(p+",precision=fp8", 3)
			j.Train.FP8Recipe, j.Train.FP8Tile = recipe, 4
			return j
		}
		ref := runJob(t, job("dp=1"), t.TempDir(), "", 0)
		for _, p := range []string{"tp=2", "pp=2,tp=2,dp=2,zero=1", "pp=2", "dp=2,zero=3"} {
			t.Run(recipe+"/"+p, func(t *testing.T) {
				if recipe == "blockwise" && strings.Contains(p, "zero=3") {
					_, err := job(p).resolve()
					if err == nil || !strings.Contains(err.Error(), "fp8_recipe=blockwise") {
						t.Fatalf("blockwise fp8 Llama under ZeRO-3: got %v, want the refusal (checkFP8Recipe)", err)
					}
					return
				}
				loss, state := halfParLoss, halfParState
				if recipe == "delayed" && strings.Contains(p, "tp=") {
					loss, state = fp8TPLoss, fp8TPState
				}
				closeTo(t, runJob(t, job(p), t.TempDir(), "", 0), ref, loss, state)
			})
		}
	}
}

// fp8TPLoss and fp8TPState bound a delayed-scaling Llama under tp against
// its single-device run (TestFP8Llama: about 3× the measured).
const (
	fp8TPLoss  = 1e-2
	fp8TPState = 4e-2
)
