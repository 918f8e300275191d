package plan

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func job(t testing.TB, model, cluster string, devices, seq, batch int) Job {
	t.Helper()
	m, err := ModelPreset(model)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ClusterPreset(cluster)
	if err != nil {
		t.Fatal(err)
	}
	return Job{Model: m, Cluster: c, Devices: devices, Seq: seq, GlobalBatch: batch}
}

func mustParse(t testing.TB, s string) Plan {
	t.Helper()
	p, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func within(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.6g, want %.6g (±%.2g%%): off by %+.3f%%", what, got, want, 100*rel, 100*(got/want-1))
	}
}

// zeroPaper is Rajbhandari et al. 2020, Figure 1: a 7.5B-parameter model
// with mixed-precision Adam (K = 12) on N_d = 64 devices needs, per device,
// 120 GB baseline, 31.4 GB with P_os, 16.6 GB with P_os+g and 1.9 GB with
// P_os+g+p. The formulas are (2+2+K)Ψ, 4Ψ + KΨ/N, 2Ψ + (2+K)Ψ/N, (2+2+K)Ψ/N.
var zeroPaper = []struct {
	zero      int
	published float64 // GB, as printed
	formula   float64 // GB, the paper's formula unrounded
}{
	{0, 120, 16 * 7.5},
	{1, 31.4, 4*7.5 + 12*7.5/64},
	{2, 16.6, 2*7.5 + 14*7.5/64},
	{3, 1.9, 16 * 7.5 / 64},
}

func TestZeROModelStatesExact(t *testing.T) {
	for _, c := range zeroPaper {
		var mem Memory
		modelStates(&mem, 7.5e9, Plan{DP: 64, CP: 1, ZeRO: c.zero, Precision: FP16})
		got := float64(mem.ModelStates()) / 1e9
		within(t, fmt.Sprintf("zero=%d model states (GB)", c.zero), got, c.formula, 1e-9)
		if math.Abs(got-c.published) > 0.05 {
			t.Errorf("zero=%d: %.3f GB does not round to the published %.1f GB", c.zero, got, c.published)
		}
	}
}

// The same figures through the whole memory model, for the 7.47B-parameter
// GPT of Narayanan et al. (h=4096, 36 layers): within 1% of the published
// values (0.43% is the model's 7.47B against the paper's round 7.5B).
func TestZeROModelStatesEndToEnd(t *testing.T) {
	j := job(t, "megatron-7.5b", "dgx-a100", 64, 2048, 64)
	for _, c := range zeroPaper {
		p := mustParse(t, fmt.Sprintf("dp=64,zero=%d,precision=fp16", c.zero))
		e, err := j.Evaluate(p)
		if err != nil {
			t.Fatal(err)
		}
		within(t, fmt.Sprintf("zero=%d model states (GB)", c.zero), float64(e.Memory.ModelStates())/1e9, c.formula, 0.01)
	}
}

func TestStageParamsSumToModel(t *testing.T) {
	for _, name := range []string{"gpt2", "llama3-8b", "megatron-1t"} {
		j := job(t, name, "dgx-a100", 8, 1024, 8)
		m := j.Model
		p := Default()
		within(t, name+" one stage", j.stageParams(p, 0), float64(m.Params()), 1e-12)
		p.PP = 4
		sum := 0.0
		for s := 0; s < 4; s++ {
			sum += j.stageParams(p, s)
		}
		want := float64(m.Params())
		if m.Tied { // the last stage holds its own copy of the tied embedding
			want += float64(m.Vocab) * float64(m.Hidden)
		}
		within(t, name+" four stages", sum, want, 1e-12)
	}
}

// Korthikanti et al. 2022, Table 2: activation bytes per transformer layer
// (16-bit activations, 1-byte dropout masks, no flash attention).
func TestActivationFormulasKorthikanti(t *testing.T) {
	j := job(t, "megatron-530b", "dgx-a100", 8, 2048, 8)
	s, h, a := 2048.0, 20480.0, 128.0
	for _, tp := range []int{1, 2, 8} {
		tf := float64(tp)
		for _, c := range []struct {
			plan    string
			formula float64 // multiples of s·b·h
		}{
			{"", 10 + 24/tf + 5*a*s/(h*tf)},                  // tensor parallel only
			{"sp=on", 34/tf + 5*a*s/(h*tf)},                  // + sequence parallel
			{"recompute=selective", 10 + 24/tf},              // + selective recomputation
			{"sp=on,recompute=selective", 34 / tf},           // both
			{"recompute=full", 2},                            // full: the layer input
			{"sp=on,recompute=full", 2 / tf},                 // full, input split by sp
			{"mbs=4", 4 * (10 + 24/tf + 5*a*s/(h*tf))},       // b = 4
			{"recompute=selective,mbs=2", 2 * (10 + 24/tf)},  // b = 2
			{"sp=on,recompute=selective,mbs=3", 3 * 34 / tf}, // b = 3
			{"recompute=none,sp=on,mbs=2", 2 * (34/tf + 5*a*s/(h*tf))},
		} {
			if tp == 1 && strings.Contains(c.plan, "sp=on") {
				continue // sequence parallelism needs tp > 1
			}
			text := fmt.Sprintf("tp=%d,flash=off", tp)
			if c.plan != "" {
				text += "," + c.plan
			}
			p := mustParse(t, text)
			got := j.activations(p).layer / (s * h)
			within(t, fmt.Sprintf("t=%d %s per-layer activations (sbh)", tp, c.plan), got, c.formula, 1e-12)
		}
	}
}

// Flash attention keeps no s×s term: only the per-head log-sum-exp.
func TestActivationsFlash(t *testing.T) {
	j := job(t, "megatron-530b", "dgx-a100", 8, 2048, 8)
	s, h, a := 2048.0, 20480.0, 128.0
	p := mustParse(t, "tp=8,sp=on,flash=on")
	want := s * h * 34 / 8
	want += s * 4 * a / 8
	within(t, "flash per-layer activations", j.activations(p).layer, want, 1e-12)
}

// Llama: no dropout masks, SwiGLU keeps 3f, grouped-query attention keeps
// kv/a of K and V.
func TestActivationsLlama(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 8192, 8)
	p := mustParse(t, "tp=4,sp=on")
	T, h, f, d, e := 8192.0, 4096.0, 14336.0, 128.0, 2.0
	perToken := (4*h*e + (32+2*8)*d*e + 32*d*e + 3*f*e + 4*32) / 4
	within(t, "llama per-layer activations", j.activations(p).layer, T*perToken, 1e-12)
}

// The schedule's micro-batches in flight on stage 0 and the resulting
// first-stage total: Korthikanti's L·sbh·34/t for 1F1B with sp and
// selective recomputation, times 1 + (p-1)/(p·v) interleaved.
func TestInFlightAndStageTotal(t *testing.T) {
	j := job(t, "megatron-530b", "dgx-a100", 280, 2048, 280)
	L := 105.0
	sbh := 2048.0 * 20480
	for _, c := range []struct {
		plan     string
		inflight float64
	}{
		{"tp=8,pp=35,sp=on,recompute=selective,flash=off", 35},
		{"tp=8,pp=35,vpp=3,schedule=interleaved,sp=on,recompute=selective,flash=off", 35 * (1 + 34.0/(35*3))},
		{"tp=8,pp=35,schedule=gpipe,sp=on,recompute=selective,flash=off", 280},
	} {
		p := mustParse(t, c.plan)
		p.DP = 1
		within(t, c.plan+" in flight", j.inFlight(p, 0), c.inflight, 1e-12)
		layers := j.activations(p).layer * float64(j.Model.Layers/p.PP) * j.inFlight(p, 0)
		within(t, c.plan+" stage-0 layer activations", layers, L*sbh*34/8*c.inflight/35, 1e-12)
	}
	// 1F1B holds pp - stage micro-batches; fewer when there are fewer.
	p := mustParse(t, "tp=8,pp=35")
	p.DP = 1
	if got := j.inFlight(p, 34); got != 1 {
		t.Errorf("last stage keeps %g micro-batches, want 1", got)
	}
	small := j
	small.GlobalBatch = 4
	if got := small.inFlight(p, 0); got != 4 {
		t.Errorf("stage 0 with 4 micro-batches keeps %g, want 4", got)
	}
}

// Each memory-saving option lowers the prediction it should lower, and no
// other category moves.
func TestMemoryMechanisms(t *testing.T) {
	j := job(t, "llama3-70b", "dgx-h100", 64, 8192, 128)
	base := "dp=8,tp=8,flash=off"
	for _, c := range []struct {
		more, less string
		field      func(Memory) int64
	}{
		{base, base + ",zero=1", func(m Memory) int64 { return m.Optim }},
		{base + ",zero=1", base + ",zero=2", func(m Memory) int64 { return m.Grad }},
		{base + ",zero=2", base + ",zero=3", func(m Memory) int64 { return m.Param }},
		{base, base + ",sp=on", func(m Memory) int64 { return m.Act }},
		{base, base + ",recompute=selective", func(m Memory) int64 { return m.Act }},
		{base + ",recompute=selective", base + ",recompute=full", func(m Memory) int64 { return m.Act }},
		{base, "dp=8,tp=8,flash=on", func(m Memory) int64 { return m.Act }},
		{base + ",mbs=2", base, func(m Memory) int64 { return m.Act }},
		{"dp=2,tp=8,pp=4,schedule=gpipe", "dp=2,tp=8,pp=4", func(m Memory) int64 { return m.Act }},
		{"dp=2,tp=8,pp=4,vpp=2,schedule=interleaved", "dp=2,tp=8,pp=4", func(m Memory) int64 { return m.Act }},
		{"precision=fp32,dp=8,tp=8", "dp=8,tp=8", func(m Memory) int64 { return m.Param }},
	} {
		more := j.Memory(mustParse(t, c.more))
		less := j.Memory(mustParse(t, c.less))
		if !(c.field(less) < c.field(more)) {
			t.Errorf("%s should need less than %s: %s vs %s", c.less, c.more, Bytes(c.field(less)), Bytes(c.field(more)))
		}
	}
}

func TestMostLoadedStage(t *testing.T) {
	// Llama 3 8B over 4 stages: stage 0 holds 4 micro-batches, the last
	// stage one micro-batch plus the 128K-vocabulary logits in fp32.
	j := job(t, "llama3-8b", "dgx-h100", 4, 8192, 64)
	p := mustParse(t, "pp=4,recompute=full")
	sp, a := j.shapeParams(p), j.activations(p)
	first, last := j.stageMemory(p, sp, a, 0, 8), j.stageMemory(p, sp, a, 3, 8)
	if m := j.Memory(p); m.Total != max(first.Total, last.Total) {
		t.Fatalf("Memory picked %d, stages %d and %d", m.Total, first.Total, last.Total)
	}
	if last.Act <= first.Act {
		t.Errorf("with full recomputation the last stage's logits (%s) should outweigh stage 0's %s", Bytes(last.Act), Bytes(first.Act))
	}
	if first.InFlight != 4 || last.InFlight != 1 {
		t.Errorf("in flight %g and %g, want 4 and 1", first.InFlight, last.InFlight)
	}
}

func TestByTagAddsUp(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 16, 8192, 64)
	for _, s := range []string{"dp=16", "dp=2,tp=8,sp=on,zero=3", "dp=4,pp=4,zero=2,recompute=full"} {
		m := j.Memory(mustParse(t, s))
		sum := m.Reserved
		for _, v := range m.ByTag() {
			sum += v
		}
		if sum != m.Total || len(m.ByTag()) != 6 {
			t.Errorf("%s: tags sum to %d + reserve, total %d", s, sum, m.Total)
		}
	}
}
