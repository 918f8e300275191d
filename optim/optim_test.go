package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"trellis/device"
	"trellis/ops"
)

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// refAdamW is the float64 model of the optimizer: per-element AdamW where
// decayed[i] says whether element i gets weight decay.
type refAdamW struct {
	p, m, v []float64
	decayed []bool
	h       Hyper
	t       int
}

func (r *refAdamW) step(g []float32, lr, scale float64) {
	r.t++
	b1, b2 := float64(float32(r.h.Beta1)), float64(float32(r.h.Beta2))
	for i := range r.p {
		gi := float64(g[i]) * scale
		r.m[i] = b1*r.m[i] + (1-b1)*gi
		r.v[i] = b2*r.v[i] + (1-b2)*gi*gi
		mh := r.m[i] / (1 - math.Pow(b1, float64(r.t)))
		vh := r.v[i] / (1 - math.Pow(b2, float64(r.t)))
		wd := 0.0
		if r.decayed[i] {
			wd = r.h.WeightDecay
		}
		r.p[i] -= lr * (mh/(math.Sqrt(vh)+r.h.Eps) + wd*r.p[i])
	}
}

// gptTensors is a toy parameter layout: embedding, LN gain/bias, a matrix
// and its bias, laid out flat.
func gptTensors() ([]Tensor, int) {
	ts := []Tensor{
		{"wte", 0, []int{10, 8}},
		{"ln.w", 80, []int{8}},
		{"ln.b", 88, []int{8}},
		{"fc.w", 96, []int{16, 8}},
		{"fc.w2", 224, []int{8, 16}},
		{"fc.b", 352, []int{16}},
	}
	return ts, 368
}

func TestDecay2D(t *testing.T) {
	ts, _ := gptTensors()
	got := Decay2D(ts)
	want := []Range{{0, 80}, {96, 256}}
	if len(got) != len(want) {
		t.Fatalf("Decay2D = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Decay2D = %v, want %v", got, want)
		}
	}
}

func TestSegments(t *testing.T) {
	decay := []Range{{96, 256}, {0, 80}}
	cases := []struct {
		off, n int
		want   []segment
	}{
		{0, 368, []segment{{0, 80, true}, {80, 96, false}, {96, 352, true}, {352, 368, false}}},
		{50, 100, []segment{{0, 30, true}, {30, 46, false}, {46, 100, true}}},
		{80, 16, []segment{{0, 16, false}}},
		{100, 10, []segment{{0, 10, true}}},
		{360, 20, []segment{{0, 20, false}}},
	}
	for _, tc := range cases {
		got := segments(tc.off, tc.n, decay)
		if len(got) != len(tc.want) {
			t.Errorf("segments(%d,%d) = %v, want %v", tc.off, tc.n, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("segments(%d,%d) = %v, want %v", tc.off, tc.n, got, tc.want)
				break
			}
		}
	}
}

// TestAdamWAgainstFloat64 runs the optimizer with decay ranges, clipping
// and a schedule against the float64 model, whole and sharded.
func TestAdamWAgainstFloat64(t *testing.T) {
	ts, n := gptTensors()
	decay := Decay2D(ts)
	sched := Schedule{Warmup: 3, Steps: 12, LR: 3e-2, MinLR: 3e-3}
	cases := []struct {
		name    string
		shards  int
		maxNorm float64
		threads int
	}{
		{"whole", 1, 0, 0},
		{"whole-clipped", 1, 0.05, 0},
		{"shards3-clipped", 3, 0.05, 0},
		{"shards4-threads2", 4, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, 4))
			params := randVec(r, n, 0.3)
			grads := make([]float32, n)
			ref := &refAdamW{p: make([]float64, n), m: make([]float64, n), v: make([]float64, n),
				decayed: make([]bool, n), h: DefaultHyper()}
			for i := range params {
				ref.p[i] = float64(params[i])
			}
			for _, rg := range decay {
				for i := rg.Off; i < rg.End(); i++ {
					ref.decayed[i] = true
				}
			}
			k := testKernels(t) // threads 0 in the table: the best ISA on one thread
			if tc.threads > 0 {
				var err error
				if k, err = ops.New(ops.Config{Threads: tc.threads, ISA: "generic"}); err != nil {
					t.Fatal(err)
				}
			}
			dev := device.New(device.Config{})
			var opts []*AdamW
			for s := 0; s < tc.shards; s++ {
				lo, hi := s*n/tc.shards, (s+1)*n/tc.shards
				o, err := New(Config{Params: params[lo:hi], Grads: grads[lo:hi], Offset: lo, Decay: decay,
					Hyper: DefaultHyper(), Device: dev, Kernels: k})
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, o)
			}
			if got := dev.Stats().Live[device.Optim]; got != int64(8*n) {
				t.Fatalf("optim bytes = %d, want 8·n = %d", got, 8*n)
			}
			for step := 0; step < sched.Steps; step++ {
				copy(grads, randVec(r, n, 0.01))
				var sumsq float64 // partials combined as an all-reduce would
				for s := 0; s < tc.shards; s++ {
					lo, hi := s*n/tc.shards, (s+1)*n/tc.shards
					sumsq += SumSquares(grads[lo:hi])
				}
				scale := ClipScale(math.Sqrt(sumsq), tc.maxNorm)
				for _, o := range opts {
					o.Step(sched.At(step), scale)
				}
				ref.step(grads, float64(float32(sched.At(step))), float64(float32(scale)))
			}
			var worst float64
			for i := range params {
				worst = max(worst, math.Abs(float64(params[i])-ref.p[i]))
			}
			if worst > 1e-6 {
				t.Fatalf("max |p - p_ref| = %.3g, want <= 1e-6", worst)
			}
			for _, o := range opts {
				o.Free()
			}
			if got := dev.Stats().Live[device.Optim]; got != 0 {
				t.Fatalf("after Free: optim bytes = %d, want 0", got)
			}
		})
	}
}

// TestStateRoundTrip: saving the state after k steps and restoring it into
// a fresh optimizer continues bit-identically.
func TestStateRoundTrip(t *testing.T) {
	ts, n := gptTensors()
	r := rand.New(rand.NewPCG(5, 6))
	p0 := randVec(r, n, 0.3)
	gs := make([][]float32, 6)
	for i := range gs {
		gs[i] = randVec(r, n, 0.01)
	}
	newOpt := func(params, grads []float32) *AdamW {
		o, err := New(Config{Params: params, Grads: grads, Decay: Decay2D(ts), Hyper: DefaultHyper(),
			Device: device.New(device.Config{}), Kernels: testKernels(t)})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	straight := append([]float32(nil), p0...)
	g := make([]float32, n)
	o := newOpt(straight, g)
	for i := range gs {
		copy(g, gs[i])
		o.Step(1e-2, 1)
	}

	split := append([]float32(nil), p0...)
	o1 := newOpt(split, g)
	for i := 0; i < 3; i++ {
		copy(g, gs[i])
		o1.Step(1e-2, 1)
	}
	st := o1.State()
	saved := State{Step: st.Step, M: append([]float32(nil), st.M...), V: append([]float32(nil), st.V...)}
	o2 := newOpt(split, g)
	if err := o2.Restore(saved); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < len(gs); i++ {
		copy(g, gs[i])
		o2.Step(1e-2, 1)
	}
	if o2.Steps() != len(gs) {
		t.Fatalf("Steps = %d, want %d", o2.Steps(), len(gs))
	}
	for i := range straight {
		if math.Float32bits(straight[i]) != math.Float32bits(split[i]) {
			t.Fatalf("p[%d]: straight %v, resumed %v", i, straight[i], split[i])
		}
	}
	if err := o2.Restore(State{Step: 1, M: make([]float32, 3), V: make([]float32, n)}); err == nil {
		t.Fatal("Restore accepted a state of the wrong length")
	}
}

func TestConfigValidate(t *testing.T) {
	p := make([]float32, 4)
	dev := device.New(device.Config{})
	good := Config{Params: p, Grads: make([]float32, 4), Decay: []Range{}, Hyper: DefaultHyper(), Device: dev, Kernels: testKernels(t)}
	cases := []struct {
		name string
		mod  func(*Config)
		want string // "" means valid
	}{
		{"ok", func(*Config) {}, ""},
		{"grads", func(c *Config) { c.Grads = c.Grads[:3] }, "len(grads)=3"},
		{"beta1", func(c *Config) { c.Hyper.Beta1 = 1 }, "beta1=1"},
		{"beta2", func(c *Config) { c.Hyper.Beta2 = -0.1 }, "beta2=-0.1"},
		{"eps", func(c *Config) { c.Hyper.Eps = 0 }, "eps=0"},
		{"wd", func(c *Config) { c.Hyper.WeightDecay = math.NaN() }, "weight_decay=NaN"},
		{"device", func(c *Config) { c.Device = nil }, "device must be set"},
		{"decay-nil", func(c *Config) { c.Decay = nil }, "decay ranges must be given"},
		{"decay-nil-no-wd", func(c *Config) { c.Decay = nil; c.Hyper.WeightDecay = 0 }, ""},
		{"overlap", func(c *Config) { c.Decay = []Range{{0, 3}, {2, 2}} }, "overlap"},
		{"empty-range", func(c *Config) { c.Decay = []Range{{1, 0}} }, "len > 0"},
		{"offset", func(c *Config) { c.Offset = -1 }, "offset=-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestNewOutOfMemory(t *testing.T) {
	dev := device.New(device.Config{Budget: 4 * 1000})
	_, err := New(Config{Params: make([]float32, 600), Grads: make([]float32, 600), Hyper: Hyper{Beta1: 0.9, Beta2: 0.99, Eps: 1e-8}, Device: dev, Kernels: testKernels(t)})
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "second moment") {
		t.Fatalf("err = %v, want out of memory on the second moment", err)
	}
	if live := dev.Stats().LiveTotal; live != 0 {
		t.Fatalf("a failed New left %d bytes allocated", live)
	}
}

// testKernels are one-thread kernels of the CPU's best ISA.
func testKernels(t testing.TB) *ops.Kernels {
	t.Helper()
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
