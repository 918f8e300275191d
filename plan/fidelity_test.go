package plan

import (
	"math"
	"strings"
	"testing"
)

// TestHeldOutAsMegatronArgs enters the held-out runs whose recipes state
// every parallel key (NeMo's and Megatron-Bridge's performance tables: tp,
// pp, cp, vpp, micro-batch, fp8) as the Megatron-LM arguments those recipes
// run with: the stated keys plus the recipes' defaults (sequence
// parallelism with tp>1, the distributed optimizer unless the row states
// FSDP, no recomputation, overlapped gradient reduction and parameter
// gather). Read back, each is a plan the row's fix allows, with the same
// prediction as the row's searched plan (today's pinned prediction) and so
// within the row's tolerance of the published figure.
// (The Megatron-LM README rows do not state the micro-batch size.)
func TestHeldOutAsMegatronArgs(t *testing.T) {
	n := 0
	for _, h := range heldOutSet() {
		if !strings.Contains(h.source, "Megatron-Bridge") && !strings.Contains(h.source, "NeMo") {
			continue
		}
		j := h.job(t)
		fix, err := ParseFix(h.fix)
		if err != nil {
			t.Fatal(err)
		}
		args := megatronRecipe(j, fix)
		im, err := j.Import(Megatron, args, Fix{})
		if err != nil {
			t.Errorf("%s %s: %v\n%s", h.source, h.model, err, args)
			continue
		}
		if !fix.Allows(im.Plan) {
			t.Errorf("%s %s: read %s, the row pins %s", h.source, h.model, im.Plan.Short(), h.fix)
			continue
		}
		e, err := j.Evaluate(im.Plan)
		if err != nil {
			t.Errorf("%s %s: %v", h.source, h.model, err)
			continue
		}
		got := map[string]float64{"tflops": e.TFLOPsPerDevice, "tokens_per_gpu": e.TokensPerS / float64(h.devices),
			"tflops_causal": causalTFLOPs(j, e)}[h.metric]
		searched, _ := h.predict(t)
		t.Logf("%s %s: args %s: %.4g (searched plan %.4g, published %.4g)", h.source, h.model, im.Plan.Short(), got, searched, h.value)
		if math.Abs(got/searched-1) > 1e-9 {
			t.Errorf("%s %s: as arguments %s predicts %.6g, the row's searched plan %.6g", h.source, h.model, im.Plan.Short(), got, searched)
		}
		if err := got/h.value - 1; math.Abs(err) > h.tol {
			t.Errorf("%s %s: as arguments %s predicts %.4g, published %.4g (%+.1f%%, held to ±%.0f%%)",
				h.source, h.model, im.Plan.Short(), got, h.value, 100*err, 100*h.tol)
		}
		n++
	}
	if n < 9 {
		t.Errorf("%d rows entered as arguments", n)
	}
}

// megatronRecipe writes a Megatron-Core recipe's arguments for the keys p
// carries: its parallel sizes, interleaving, micro-batch and precision,
// sequence parallelism with tp>1, the distributed optimizer, the
// cluster's tp-comm-overlap, and the model's shape.
func megatronRecipe(j Job, f Fix) string {
	q := f.Value()
	q.SP, q.Recompute, q.Flash = q.TP > 1, RecomputeNone, true
	if !f.Pinned("zero") {
		q.ZeRO = 1
	}
	q.DP = j.Devices / (q.TP * q.PP * q.CP)
	return j.megatronArgs(q)
}
