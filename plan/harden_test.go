package plan

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// noPanic runs f, turning a panic into a test error.
func noPanic(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s: panic: %v", what, p)
			err = fmt.Errorf("panic")
		}
	}()
	return f()
}

// Issue 29: the planner divided by zero when degree products overflowed
// to 0 (tp=2^62 with pp=4), on huge context-parallel sizes, on mbs=2^62
// pinned or explained, on torchtitan's microbatch size 0 or degrees of
// 2^62. Each is now an error naming the key and the rule.
func TestOutsideDegreesChecked(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 4096, 64)
	rest, _ := ParseFix("")
	const big = "4611686018427387904" // 2^62
	const d24 = "16777216"
	for _, c := range []struct {
		name string
		fw   Framework
		text string
		want string
	}{
		{"megatron tp=2^62 pp=4", Megatron, "--tensor-model-parallel-size " + big + " --pipeline-model-parallel-size 4", "--tensor-model-parallel-size 4611686018427387904: want 1..16777216"},
		{"megatron cp=2^62", Megatron, "--context-parallel-size " + big, "--context-parallel-size 4611686018427387904: want 1..16777216"},
		{"megatron tp·pp·cp = 2^72", Megatron, "--tensor-model-parallel-size " + d24 + " --pipeline-model-parallel-size " + d24 + " --context-parallel-size " + d24, "does not divide the 64 devices"},
		{"megatron mbs=2^62", Megatron, "--micro-batch-size " + big, "--micro-batch-size 4611686018427387904: want 1..16777216"},
		{"megatron --fp16 --bf16", Megatron, "--fp16 --bf16", "--fp16 and --bf16 are both given"},
		{"megatron vpp layers 0", Megatron, "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0", "--num-layers-per-virtual-pipeline-stage 0: want at least 1"},
		{"megatron vpp 10^7", Megatron, "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 10000000", "10000000 virtual stages per pipeline rank: want 1..1024"},
		{"torchtitan microbatch 0", Torchtitan, "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 0", "pipeline_parallel_microbatch_size 0: want 1..16777216"},
		{"torchtitan tp=2^62", Torchtitan, "[parallelism]\ntensor_parallel_degree = " + big + "\npipeline_parallel_degree = 4", "want 1..16777216"},
		{"torchtitan 2^24 each", Torchtitan, "[parallelism]\ntensor_parallel_degree = " + d24 + "\npipeline_parallel_degree = " + d24 + "\ncontext_parallel_degree = " + d24 + "\ndata_parallel_replicate_degree = " + d24, "but the job has 64 devices"},
		{"torchtitan local batch 2^62", Torchtitan, "[training]\nlocal_batch_size = " + big, "local_batch_size 4611686018427387904: want 1..16777216"},
		{"deepspeed huge batch", DeepSpeed, `{"train_batch_size": ` + big + `, "train_micro_batch_size_per_gpu": ` + big + `}`, "train_batch_size 4611686018427387904: want 0..16777216"},
	} {
		err := noPanic(t, c.name, func() error { _, err := j.Import(c.fw, c.text, rest); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct{ text, want string }{
		{"mbs=" + big, "mbs=4611686018427387904: at most 16777216"},
		{"tp=" + big + ",pp=4", "tp=4611686018427387904: at most 16777216"},
		{"cp=" + big, "cp=4611686018427387904: at most 16777216"},
		{"pp=2,vpp=10000000,schedule=interleaved", "vpp=10000000: at most 1024 model chunks"},
	} {
		if _, err := ParseFix(c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFix(%s): %v, want %q", c.text, err, c.want)
		}
		if _, err := Parse(c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want %q", c.text, err, c.want)
		}
	}
	// Degrees each within bounds whose product overflows: a pinned search
	// and Validate refuse them without dividing by the wrapped product.
	fix, err := ParseFix("tp=" + d24 + ",pp=" + d24 + ",cp=" + d24)
	if err != nil {
		t.Fatal(err)
	}
	noPanic(t, "search with tp·pp·cp = 2^72", func() error { _, err := j.Search(Options{Fix: fix}); return err })
	p := Default()
	p.TP, p.PP, p.CP = 1<<24, 1<<24, 1<<24
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "more than 16777216 devices") {
		t.Errorf("Validate: %v", err)
	}
	// --explain of a plan with mbs=0 or dp=0 (Parse does not Validate).
	for _, s := range []string{"mbs=0", "dp=0"} {
		q, _ := Parse(s)
		noPanic(t, "explain "+s, func() error {
			if !strings.Contains(j.Explain(q, nil), "must be at least 1") || j.MicroBatches(q) != 0 {
				return fmt.Errorf("explain %s", s)
			}
			return nil
		})
	}
}

// Issue 29: a DeepSpeed config with only train_batch_size was refused;
// DeepSpeed takes gradient accumulation 1 and the micro-batch from the
// data-parallel world.
func TestDeepSpeedTrainBatchOnly(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 8192, 64)
	rest, _ := ParseFix("tp=1,pp=1")
	im, err := j.Import(DeepSpeed, `{"train_batch_size": 64}`, rest)
	if err != nil {
		t.Fatal(err)
	}
	if im.GlobalBatch != 64 || im.Plan.MBS != 8 || im.Plan.DP != 8 {
		t.Errorf("read gb=%d mbs=%d dp=%d, want 64, 8, 8", im.GlobalBatch, im.Plan.MBS, im.Plan.DP)
	}
	if im, err = j.Import(DeepSpeed, `{"train_micro_batch_size_per_gpu": 2}`, rest); err != nil || im.GlobalBatch != 16 {
		t.Errorf("micro-batch only: gb=%d %v, want 16", im.GlobalBatch, err)
	}
	if _, err := j.Import(DeepSpeed, `{"train_batch_size": 63}`, rest); err == nil {
		t.Error("63 sequences over dp=8 accepted")
	}
}

// Issue 29: products beyond int64 came out as negative memory (-8.0 EiB).
// Byte counts saturate at MaxBytes and print as such.
func TestMemoryNeverNegative(t *testing.T) {
	m := Model{Name: "huge", Family: Llama, Layers: 64, Hidden: 1 << 20, Heads: 1024, KVHeads: 1024, FFN: 1 << 20, Vocab: 1 << 24, MaxSeq: 1 << 24}
	c, _ := ClusterPreset("dgx-h100")
	j := Job{Model: m, Cluster: c, Devices: 8, Seq: 1 << 24, GlobalBatch: 1 << 24}
	for _, s := range []string{"dp=8,mbs=2097152", "dp=8,mbs=2097152,zero=3,recompute=full", "dp=1,tp=8,mbs=16777216,sp=on"} {
		e, err := j.Evaluate(mustParse(t, s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		mem := e.Memory
		for name, v := range map[string]int64{"param": mem.Param, "grad": mem.Grad, "optim": mem.Optim, "act": mem.Act, "other": mem.Other, "total": mem.Total, "act/mb": mem.ActPerMicroBatch} {
			if v < 0 {
				t.Errorf("%s: %s = %d", s, name, v)
			}
		}
		if mem.Fits() || !strings.Contains(j.Explain(e.Plan, nil), "over 1 EiB") {
			t.Errorf("%s: fits=%v, explain:\n%s", s, mem.Fits(), j.Explain(e.Plan, nil))
		}
		if !(e.Time.Step > 0) {
			t.Errorf("%s: step time %g", s, e.Time.Step)
		}
	}
}

// Issue 29: --parallel pp=2,vpp=10000000 reached 12.6 GB before the layer
// check. The parse refuses it at once.
func TestHugeVPPRefusedAtParse(t *testing.T) {
	start := time.Now()
	if _, err := ParseOnto(Default(), "pp=2,vpp=10000000,schedule=interleaved"); err == nil {
		t.Fatal("accepted")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
}
