package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/tensor"
)

// setupHalf is setup with Options.Compute = bf16 on a device that charges
// the fp32 weights as master weights.
func setupHalf(t testing.TB, cfg Config, B, threads int) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	return setupHalfOf(t, cfg, B, threads, tensor.BF16)
}

// setupHalfOf is setupHalf computing in dt (bf16 or fp16).
func setupHalfOf(t testing.TB, cfg Config, B, threads int, dt tensor.DType) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	return setupOn(t, cfg, B, threads, device.Config{MasterWeights: true}, Options{Compute: dt})
}

// bf16 rounds to bf16 and back.
func bf16(x float32) float64 { return float64(tensor.ToBF16(x).Float32()) }

// TestHalfLinear holds the bf16 and fp16 linear layers to their
// definition, computed in float64 from the rounded operands: y = res + bias
// + Σ_c x̃[n,c]·w̃[o,c], dx = Σ_o d̃y·w̃, dw += Σ_n d̃yᵀ·x̃ (x̃ = bf16(x) or
// fp16(x)), within fp32 summation error.
func TestHalfLinear(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		round := bf16
		if dt == tensor.F16 {
			round = func(x float32) float64 { return float64(tensor.ToF16(x).Float32()) }
		}
		t.Run(dt.String(), func(t *testing.T) { checkHalfLinear(t, dt, round) })
	}
}

func checkHalfLinear(t *testing.T, dt tensor.DType, bf16 func(float32) float64) {
	cfg := Config{Layers: 1, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 40}
	m, p, _, _ := setupHalfOf(t, cfg, 2, 2, dt)
	const N, C, OC = 16, 16, 48 // qkv of block 0
	w, err := m.weights(p, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	v := viewBlock(w, C)
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		return s
	}
	x, res, dout := rnd(N*C), rnd(N*OC), rnd(N*OC)
	out := make([]float32, N*OC)
	xh := make([]uint16, N*C) // the 16-bit stash's copy of the input
	m.encode(xh, x)
	m.linearForwardH(out, res, xh, v.qkvw, v.qkvb, N, C, OC)
	dx, dw := make([]float32, N*C), rnd(OC*C)
	dw0 := append([]float32(nil), dw...)
	m.linearBackwardSetH(dx, dw, nil, dout, xh, v.qkvw, N, C, OC)
	check := func(name string, got float32, want, scale float64) {
		t.Helper()
		if d := math.Abs(float64(got) - want); d > 1e-5*scale {
			t.Fatalf("%s: got %g, want %g (|diff| %g > 1e-5·%g)", name, got, want, d, scale)
		}
	}
	for n := 0; n < N; n++ {
		for o := 0; o < OC; o++ {
			want, scale := float64(res[n*OC+o])+float64(v.qkvb[o]), 1.0
			for c := 0; c < C; c++ {
				pr := bf16(x[n*C+c]) * bf16(v.qkvw[o*C+c])
				want += pr
				scale += math.Abs(pr)
			}
			check("y", out[n*OC+o], want, scale)
		}
		for c := 0; c < C; c++ {
			want, scale := 0.0, 1.0
			for o := 0; o < OC; o++ {
				pr := bf16(dout[n*OC+o]) * bf16(v.qkvw[o*C+c])
				want += pr
				scale += math.Abs(pr)
			}
			check("dx", dx[n*C+c], want, scale)
		}
	}
	for o := 0; o < OC; o++ {
		for c := 0; c < C; c++ {
			want, scale := float64(dw0[o*C+c]), 1.0
			for n := 0; n < N; n++ {
				pr := bf16(dout[n*OC+o]) * bf16(x[n*C+c])
				want += pr
				scale += math.Abs(pr)
			}
			check("dw", dw[o*C+c], want, scale)
		}
	}
}

// TestHalfTracksFP32: a bf16 forward and backward of a small model gives
// the fp32 loss within 1% and every tensor's gradient within 5% of its
// largest element, is not the fp32 computation, and is bit-identical when
// repeated.
func TestHalfTracksFP32(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	const B = 2
	mf, pf, sf, _ := setup(t, cfg, B, 2)
	mh, ph, sh, _ := setupHalf(t, cfg, B, 2)
	batch := randomBatch(cfg, B, 3)
	run := func(m *GPT, p *FlatParams, s *Stash) (float32, []float32) {
		loss, err := m.Forward(p, s, batch)
		if err != nil {
			t.Fatal(err)
		}
		p.ZeroGrads()
		if err := m.Backward(p, s, 1); err != nil {
			t.Fatal(err)
		}
		return loss, append([]float32(nil), p.G...)
	}
	lf, gf := run(mf, pf, sf)
	lh, gh := run(mh, ph, sh)
	if d := math.Abs(float64(lh-lf)) / float64(lf); d > 0.01 || d == 0 {
		t.Fatalf("loss bf16 %g fp32 %g: relative difference %g, want in (0, 0.01]", lh, lf, d)
	}
	for _, u := range mf.Layout().Units {
		for _, tn := range u.Tensors {
			var maxDiff, maxRef float64
			for i := tn.Offset; i < tn.Offset+tn.Size; i++ {
				maxRef = max(maxRef, math.Abs(float64(gf[i])))
				maxDiff = max(maxDiff, math.Abs(float64(gh[i]-gf[i])))
			}
			if maxDiff > 0.05*maxRef {
				t.Errorf("%s: bf16 gradient differs by %g, largest fp32 element %g", tn.Name, maxDiff, maxRef)
			}
		}
	}
	lh2, gh2 := run(mh, ph, sh)
	if lh2 != lh {
		t.Fatalf("bf16 loss %g then %g: not bit-identical", lh, lh2)
	}
	for i := range gh {
		if gh[i] != gh2[i] {
			t.Fatalf("bf16 gradient %d: %g then %g", i, gh[i], gh2[i])
		}
	}
}

// TestHalfMemory: the fp32 weights are charged as master weights (optim),
// the bf16 copy as param at 2 bytes per parameter, the gradients fp32.
func TestHalfMemory(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	m, _, _, dev := setupHalf(t, cfg, 2, 2)
	P := int64(m.Layout().Size)
	st := dev.Stats()
	if got := st.Live[device.Param]; got != 2*P {
		t.Errorf("param %d bytes, want 2·%d", got, P)
	}
	if got := st.Live[device.Grad]; got != 4*P {
		t.Errorf("grad %d bytes, want 4·%d", got, P)
	}
	if got := st.Live[device.Optim]; got != 4*P {
		t.Errorf("optim %d bytes (master weights only, no optimizer here), want 4·%d", got, P)
	}
}

// TestHalfTPPart: a tensor-parallel part computes in bf16 with a copy of
// its own weights (2 bytes × PartLayout's size) and the 16-bit scratch of
// its local widths, dims.halfScratch: dy B·T·max(C, 4C/t, ⌈V/t⌉), and x
// only with SP (B·T·C, the gathered LayerNorm output): the GEMMs read
// their activation operands from the 16-bit stash.
func TestHalfTPPart(t *testing.T) {
	k, _ := ops.New(ops.Config{Threads: 1})
	const B = 2
	cfg := tiny
	cfg.SeqLen = 4 // SP: t divides it
	C, BT := cfg.Hidden, B*cfg.SeqLen
	F, Vl := 4*C/2, (cfg.Vocab+1)/2
	for _, sp := range []bool{false, true} {
		dev := device.New(device.Config{MasterWeights: true})
		part := Part{TP: 2, SP: sp}
		m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Part: part, TP: soloTP{}, Compute: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := dev.Stats().Live[device.Param], int64(2*cfg.PartLayout(part).Size); got != want {
			t.Errorf("sp=%v: param %d bytes, want the part's 2·%d", sp, got, want/2)
		}
		nx := 0
		if sp {
			nx = BT * C
		}
		if len(m.half.x) != nx || len(m.half.dy) != BT*max(C, F, Vl) {
			t.Errorf("sp=%v: 16-bit scratch x %d, dy %d elements, want %d, %d", sp, len(m.half.x), len(m.half.dy), nx, BT*max(C, F, Vl))
		}
		m.Free()
	}
}

// TestHalfUnits: with Options.Units (a pipeline stage's) the resident
// 16-bit copy holds those units only, a unit outside them is refused when
// fetched, and one outside the model when the runner is built.
func TestHalfUnits(t *testing.T) {
	k, _ := ops.New(ops.Config{Threads: 1})
	dev := device.New(device.Config{MasterWeights: true})
	units := []int{0, 2}
	m, err := New(Options{Model: tiny, Kernels: k, Device: dev, MicroBatch: 1, Compute: tensor.BF16, Units: units})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	lay := tiny.Layout()
	if got, want := dev.Stats().Live[device.Param], int64(2*(lay.Units[0].Size+lay.Units[2].Size)); got != want {
		t.Errorf("param %d bytes, want 2 × units 0 and 2 = %d", got, want)
	}
	p, err := NewFlatParams(tiny, dev)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if _, err := m.weights(p, 2, true); err != nil {
		t.Errorf("unit 2: %v", err)
	}
	if _, err := m.weights(p, 1, true); err == nil || !strings.Contains(err.Error(), "unit 1 has no bf16 copy") {
		t.Errorf("unit 1 (not held): got %v, want a refusal naming it", err)
	}
	_, err = New(Options{Model: tiny, Kernels: k, Device: dev, MicroBatch: 1, Compute: tensor.BF16, Units: []int{len(lay.Units)}})
	if err == nil || !strings.Contains(err.Error(), "Options.Units: unit 4 is not in [0, 4)") {
		t.Errorf("a unit outside the model: got %v", err)
	}
	_, err = New(Options{Model: tiny, Kernels: k, Device: dev, MicroBatch: 1, Compute: tensor.BF16, Units: []int{2, 2}})
	if err == nil || !strings.Contains(err.Error(), "Options.Units: unit 2 is listed twice") {
		t.Errorf("a unit listed twice: got %v", err)
	}
}

// TestHalfPerUnit: with HalfPerUnit the bf16 copy exists only while a
// unit is fetched (param live 0 between passes, peak 2 bytes × the largest
// unit) and the pass is bit-identical to the resident copy's.
func TestHalfPerUnit(t *testing.T) {
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	const B = 2
	mr, pr, sr, _ := setupHalf(t, cfg, B, 1)
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{MasterWeights: true})
	mu, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Compute: tensor.BF16, HalfPerUnit: true})
	if err != nil {
		t.Fatal(err)
	}
	pu, err := NewFlatParams(cfg, dev)
	if err != nil {
		t.Fatal(err)
	}
	copy(pu.W, pr.W)
	su, err := mu.NewStash()
	if err != nil {
		t.Fatal(err)
	}
	if l := dev.Stats().Live[device.Param]; l != 0 {
		t.Fatalf("param live %d bytes before any pass, want 0", l)
	}
	batch := randomBatch(cfg, B, 3)
	for _, r := range []struct {
		m *GPT
		p *FlatParams
		s *Stash
	}{{mr, pr, sr}, {mu, pu, su}} {
		if _, err := r.m.Forward(r.p, r.s, batch); err != nil {
			t.Fatal(err)
		}
		r.p.ZeroGrads()
		if err := r.m.Backward(r.p, r.s, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pr.G {
		if pr.G[i] != pu.G[i] {
			t.Fatalf("gradient %d: resident %g, per unit %g", i, pr.G[i], pu.G[i])
		}
	}
	maxUnit := 0
	for _, u := range mu.Layout().Units {
		maxUnit = max(maxUnit, u.Size)
	}
	st := dev.Stats()
	if st.Live[device.Param] != 0 || st.Peak[device.Param] != int64(2*maxUnit) {
		t.Errorf("param live %d, peak %d bytes; want 0 and 2·%d", st.Live[device.Param], st.Peak[device.Param], maxUnit)
	}
}

// TestHalfFallback: where the bf16 pairs kernels are not used (a CPU
// without AVX512_BF16, here forced with isa=avx2 and generic), the bf16
// runner widens its operands to fp32 at packing and gives the same loss
// and gradients as with VDPBF16PS within fp32 summation error: the products
// of bf16 values are exact either way.
func TestHalfFallback(t *testing.T) {
	cfg := Config{Layers: 1, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	const B = 2
	batch := randomBatch(cfg, B, 3)
	run := func(isa string) (float32, []float32, string) {
		k, err := ops.New(ops.Config{Threads: 1, ISA: isa})
		if err != nil {
			t.Skipf("isa=%s: %v", isa, err)
		}
		dev := device.New(device.Config{MasterWeights: true})
		m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Compute: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewFlatParams(cfg, dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := InitRange(cfg, 1, p.W, 0, len(p.W)); err != nil {
			t.Fatal(err)
		}
		s, err := m.NewStash()
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Forward(p, s, batch)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(p, s, 1); err != nil {
			t.Fatal(err)
		}
		return loss, p.G, k.BF16ISA()
	}
	l0, g0, isa0 := run("auto")
	for _, isa := range []string{"avx2", "generic"} {
		l, g, name := run(isa)
		if name != isa+"+widen" {
			t.Fatalf("isa=%s runs bf16 as %s, want %s+widen", isa, name, isa)
		}
		if d := math.Abs(float64(l - l0)); d > 1e-5*math.Abs(float64(l0)) {
			t.Errorf("%s (%s): loss %g, %s %g", isa, name, l, isa0, l0)
		}
		var maxDiff, maxRef float64
		for i := range g0 {
			maxRef = max(maxRef, math.Abs(float64(g0[i])))
			maxDiff = max(maxDiff, math.Abs(float64(g[i]-g0[i])))
		}
		if maxDiff > 1e-4*maxRef {
			t.Errorf("%s (%s): gradients differ by %g (largest %g)", isa, name, maxDiff, maxRef)
		}
	}
}
