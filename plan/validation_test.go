package plan

import (
	"fmt"
	"math"
	"testing"
)

// published is one measured training throughput from a paper, with the plan
// keys the paper states (the planner searches the rest, as the authors
// tuned them).
type published struct {
	source  string
	model   string
	devices int
	seq     int
	batch   int
	fix     string
	metric  string  // "hw_tflops": TFLOP/s per GPU counting recomputation; "step_s": seconds per iteration
	value   float64 // as published
	cluster string  // a preset or a file under testdata/; "" is dgx-a100
}

// The validation set. Narayanan et al. 2021, Table 1 (GPT on DGX A100,
// vocabulary 51,200, sequence 2048, fp16, activation recomputation, the
// interleaved schedule where pp > 1): achieved TFLOP/s per GPU, counted by
// their formula 96·B·s·l·h²(1 + s/6h + V/16lh), which includes the
// recomputed forward. Korthikanti et al. 2022, Table 5 (A100, micro-batch
// 1, except the 22B model's 4, their Table 3): seconds per iteration with
// full recomputation and with sequence parallelism plus selective
// recomputation, on the Megatron-LM of 2022 (testdata/megatron-2022-a100.toml:
// the dgx-a100 hardware, an asynchronous tensor-parallel backward).
func validationSet() []published {
	const nar = "tp=%d,pp=%d,cp=1,zero=0,sp=off,recompute=full,flash=off,precision=fp16"
	n := func(model string, tp, pp, gpus, batch int, tflops float64) published {
		return published{"Narayanan 2021 T1", model, gpus, 2048, batch, fmt.Sprintf(nar, tp, pp), "hw_tflops", tflops, ""}
	}
	const kor = "tp=8,pp=%d,cp=1,zero=0,mbs=%d,flash=off,precision=bf16,%s"
	const k22 = "megatron-2022-a100.toml"
	k := func(model string, pp, gpus, mbs int, full, sel float64) []published {
		return []published{
			{"Korthikanti 2022 T5 full", model, gpus, 2048, gpus, fmt.Sprintf(kor, pp, mbs, "sp=off,recompute=full"), "step_s", full, k22},
			{"Korthikanti 2022 T5 sp+sel", model, gpus, 2048, gpus, fmt.Sprintf(kor, pp, mbs, "sp=on,recompute=selective"), "step_s", sel, k22},
		}
	}
	set := []published{
		n("megatron-1.7b", 1, 1, 32, 512, 137),
		n("megatron-3.6b", 2, 1, 64, 512, 138),
		n("megatron-7.5b", 4, 1, 128, 512, 142),
		n("megatron-18.4b", 8, 1, 256, 1024, 135),
		n("megatron-39.1b", 8, 2, 512, 1536, 138),
		n("megatron-76.1b", 8, 4, 1024, 1792, 140),
		n("megatron-145.6b", 8, 8, 1536, 2304, 148),
		n("megatron-310.1b", 8, 16, 1920, 2160, 155),
		n("megatron-530b", 8, 35, 2520, 2520, 163),
		n("megatron-1t", 8, 64, 3072, 3072, 163),
	}
	set = append(set, k("megatron-22b", 1, 8, 4, 1.42, 1.10)...)
	set[len(set)-2].batch, set[len(set)-1].batch = 4, 4 // the 22B runs used a global batch of 4
	set = append(set, k("megatron-175b", 8, 64, 1, 18.13, 13.75)...)
	set = append(set, k("megatron-530b", 35, 280, 1, 49.05, 37.83)...)
	set = append(set, k("megatron-1t", 64, 512, 1, 94.42, 71.49)...)
	return set
}

func (v published) predict(t testing.TB) (float64, Estimate) {
	j := heldOut{model: v.model, cluster: v.clusterName(), devices: v.devices, seq: v.seq, batch: v.batch}.job(t)
	f, err := ParseFix(v.fix)
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Search(Options{Fix: f, Top: 1})
	if err != nil || len(res.Plans) == 0 {
		t.Fatalf("%s %s: no plan (%v, %v)", v.source, v.model, err, res.Rejected)
	}
	e := res.Plans[0]
	if v.metric == "step_s" {
		return e.Time.Step, e
	}
	return e.HWTFLOPsPerDevice, e
}

func (v published) clusterName() string {
	if v.cluster == "" {
		return "dgx-a100"
	}
	return v.cluster
}

func (v published) command() string {
	return heldOut{model: v.model, cluster: v.clusterName(), devices: v.devices, seq: v.seq, batch: v.batch, fix: v.fix}.command()
}

// TestPublishedThroughput holds the time model to the target:
// every published throughput within ±15%. Run with -v for the table in
// docs/PLANNER.md.
func TestPublishedThroughput(t *testing.T) {
	worst := 0.0
	for _, v := range validationSet() {
		got, e := v.predict(t)
		err := got/v.value - 1
		worst = math.Max(worst, math.Abs(err))
		t.Logf("| %s | %s | %d | %s | %.4g | %.4g | %+.1f%% | %.1f%% | `%s` |",
			v.source, v.model, v.devices, v.metric, v.value, got, 100*err, 100*e.MFU, e.Plan.Short())
		if math.Abs(err) > 0.15 {
			t.Errorf("%s %s: predicted %.4g, published %.4g (%+.1f%%); reproduce: %s", v.source, v.model, got, v.value, 100*err, v.command())
		}
	}
	t.Logf("worst error %.1f%%", 100*worst)
}
