package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/precision"
	"trellis/tensor"
)

// setupHalf is setup under the bf16 policy.
func setupHalf(t testing.TB, cfg Config, B, threads int) (*GPT, *FlatParams, *Stash, *device.Device) {
	t.Helper()
	return setupOn(t, cfg, B, threads, Options{Precision: precision.BF16()})
}

// TestHalfLinear holds a linear layer under a 16-bit policy to its
// definition, computed in float64 from the rounded operands: y = res + b +
// Σ_c x̃[n,c]·w̃[o,c], dx = Σ_o d̃y·w̃, dw += Σ_n d̃yᵀ·x̃ (x̃ = bf16(x) or
// fp16(x)), within fp32 summation error.
func TestHalfLinear(t *testing.T) {
	for _, pol := range []precision.Policy{precision.BF16(), precision.FP16(1, 1)} {
		t.Run(pol.String(), func(t *testing.T) { checkHalfLinear(t, pol) })
	}
}

func checkHalfLinear(t *testing.T, pol precision.Policy) {
	dt := pol.Compute
	round := func(x float32) float64 { return float64(tensor.ToBF16(x).Float32()) }
	if dt == tensor.F16 {
		round = func(x float32) float64 { return float64(tensor.ToF16(x).Float32()) }
	}
	cfg := Config{Layers: 1, Hidden: 16, Heads: 2, SeqLen: 8, Vocab: 40}
	m, _, _, _ := setupOn(t, cfg, 2, 2, Options{Precision: pol})
	const N, C, OC = 16, 16, 48 // qkv of block 0
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = float32(r.NormFloat64())
		}
		return s
	}
	x, res, dout, w, b := rnd(N*C), rnd(N*OC), rnd(N*OC), rnd(OC*C), rnd(OC)
	enc := func(v []float32) tensor.Buf {
		h := tensor.Halves(dt, make([]uint16, len(v)))
		m.k.Encode(h, v)
		return h
	}
	xh, wh := enc(x), enc(w)
	out := make([]float32, N*OC)
	l := linear{in: C, out: OC}
	l.gemm(m, out, res, xh, wh, b, N)
	dx, dw := make([]float32, N*C), rnd(OC*C)
	dw0 := append([]float32(nil), dw...)
	l.backward(m, dx, dout, xh, wh, linGrads{w: dw}, N)
	check := func(name string, got float32, want, scale float64) {
		t.Helper()
		if d := math.Abs(float64(got) - want); d > 1e-5*scale {
			t.Fatalf("%s: got %g, want %g (|diff| %g > 1e-5·%g)", name, got, want, d, scale)
		}
	}
	for n := 0; n < N; n++ {
		for o := 0; o < OC; o++ {
			want, scale := float64(res[n*OC+o])+float64(b[o]), 1.0
			for c := 0; c < C; c++ {
				pr := round(x[n*C+c]) * round(w[o*C+c])
				want += pr
				scale += math.Abs(pr)
			}
			check("y", out[n*OC+o], want, scale)
		}
		for c := 0; c < C; c++ {
			want, scale := 0.0, 1.0
			for o := 0; o < OC; o++ {
				pr := round(dout[n*OC+o]) * round(w[o*C+c])
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
				pr := round(dout[n*OC+o]) * round(x[n*C+c])
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

// TestHalfMemory: under a mixed policy FlatParams charges its fp32
// weights as master weights (optim), the bf16 copy the passes read as
// param at 2 bytes per parameter, the gradients fp32; the runner keeps no
// copy of its own.
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

// TestHalfTPPart: a tensor-parallel part's 16-bit scratch has its local
// widths (dims.go's workspace): dy B·T·max(C, 4C/t, ⌈V/t⌉), and x only
// with SP (B·T·C, the gathered norm output): the GEMMs read their
// activation operands from the 16-bit stash.
func TestHalfTPPart(t *testing.T) {
	k, _ := ops.New(ops.Config{Threads: 1})
	const B = 2
	cfg := tiny
	cfg.SeqLen = 4 // SP: t divides it
	C, BT := cfg.Hidden, B*cfg.SeqLen
	F, Vl := 4*C/2, (cfg.Vocab+1)/2
	for _, sp := range []bool{false, true} {
		dev := device.New(device.Config{})
		part := Part{TP: 2, SP: sp}
		m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Part: part, TP: soloTP{}, Precision: precision.BF16()})
		if err != nil {
			t.Fatal(err)
		}
		nx := 0
		if sp {
			nx = BT * C
		}
		if m.w.x.Len() != nx || m.w.dy.Len() != BT*max(C, F, Vl) {
			t.Errorf("sp=%v: 16-bit scratch x %d, dy %d elements, want %d, %d", sp, m.w.x.Len(), m.w.dy.Len(), nx, BT*max(C, F, Vl))
		}
		m.Free()
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
		dev := device.New(device.Config{})
		m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B, Seed: 9, Precision: precision.BF16()})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPartParams(cfg, Part{}, precision.BF16(), dev)
		if err != nil {
			t.Fatal(err)
		}
		if err := InitRange(cfg, 1, p.W, 0, len(p.W)); err != nil {
			t.Fatal(err)
		}
		p.Sync(k)
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
