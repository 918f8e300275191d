package model

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// setTestBias gives every MoE block of m (with router_expert_bias) the
// bias 0.2·(e mod 2) − 0.1·e/E: large enough against the router's scores
// to change some tokens' choices.
func setTestBias(t testing.TB, m *GPT) {
	t.Helper()
	if !m.cfg.RouterExpertBias {
		return
	}
	E := m.cfg.Experts
	for l := range m.cfg.Layers {
		if !m.cfg.MoELayer(l) {
			continue
		}
		b := make([]float32, E)
		for e := range b {
			b[e] = 0.2*float32(e%2) - 0.1*float32(e)/float32(E)
		}
		if err := m.SetExpertBias(l, b); err != nil {
			t.Fatal(err)
		}
	}
}

// The bias selects, the scores gate: each token's k experts are those of
// highest p + b (ties to the lower index), their gates the unbiased p;
// a sigmoid router's gates are the chosen unbiased scores over their sum.
func TestRouteBias(t *testing.T) {
	const N, E, K = 3, 4, 2
	probs := []float32{
		0.5, 0.3, 0.1, 0.1, // biased 0.5, 0.3, 0.35, 0.1: 0, 2
		0.1, 0.2, 0.3, 0.4, // biased 0.1, 0.2, 0.55, 0.4: 2, 3
		0.2, 0.2, 0.1, 0.5, // biased 0.2, 0.2, 0.35, 0.5: 3, 2
	}
	bias := []float32{0, 0, 0.25, 0}
	mk := func() routing {
		return routing{experts: make([]int32, N*K), rows: make([]int32, N*K), gates: make([]float32, N*K), load: make([]int32, E), offs: make([]int32, E+1)}
	}
	r := mk()
	route(&r, probs, bias, N, E, K, 0)
	if want := []int32{0, 2, 2, 3, 3, 2}; !slices.Equal(r.experts, want) {
		t.Errorf("experts %v, want %v", r.experts, want)
	}
	if want := []float32{0.5, 0.1, 0.3, 0.4, 0.5, 0.1}; !slices.Equal(r.gates, want) {
		t.Errorf("gates %v, want the unbiased scores %v", r.gates, want)
	}
	if want := []int32{1, 0, 3, 2}; !slices.Equal(r.load, want) {
		t.Errorf("load %v, want %v", r.load, want)
	}
	unbiased := mk()
	route(&unbiased, probs, nil, N, E, K, 0)
	if slices.Equal(unbiased.experts, r.experts) {
		t.Errorf("the bias changed no choice: %v", r.experts)
	}
	// Ties after the bias: the lower index first.
	tie := mk()
	route(&tie, []float32{0.5, 0.25, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []float32{0, 0.25, 0, 0}, N, E, K, 0)
	if want := []int32{0, 1}; !slices.Equal(tie.experts[:2], want) {
		t.Errorf("tie: experts %v, want %v", tie.experts[:2], want)
	}
	// A sigmoid router's gates: the chosen unbiased scores normalised.
	normalizeGates(r.gates, N, K)
	for i, want := range []float64{0.5 / 0.6, 0.1 / 0.6, 0.3 / 0.7, 0.4 / 0.7, 0.5 / 0.6, 0.1 / 0.6} {
		if math.Abs(float64(r.gates[i])-want) > 1e-6 {
			t.Errorf("sigmoid gate %d: %g, want %g", i, r.gates[i], want)
		}
	}
}

// The update rule: b_e += u·sign(mean − load_e) on the exact integer
// counts (an expert at the mean stays, even where the mean in floating
// point would not be exactly it).
func TestBiasStep(t *testing.T) {
	for _, c := range []struct {
		load    []int64
		b, want []float32
		u       float32
	}{
		{[]int64{3, 3, 2, 0}, []float32{0, 0, 0, 0}, []float32{-0.5, -0.5, 0, 0.5}, 0.5},
		{[]int64{5, 5, 5, 5}, []float32{1, -1, 0, 2}, []float32{1, -1, 0, 2}, 0.5},
		{[]int64{0, 0, 12, 0}, []float32{0.25, 0, 0, 0}, []float32{0.5, 0.25, -0.25, 0.25}, 0.25},
		// mean (3·2^53 + 1)/3 is no float64; experts 1 and 2 sit on it.
		{[]int64{1 << 53, 1<<53 + 1, 1<<53 + 1, 1 << 53}, []float32{0, 0, 0, 0}, []float32{0.125, -0.125, -0.125, 0.125}, 0.125},
		{[]int64{1<<53 + 1, 1<<53 + 1, 1 << 53}, []float32{0, 0, 0}, []float32{-0.125, -0.125, 0.125}, 0.125},
	} {
		b := slices.Clone(c.b)
		biasStep(b, c.load, c.u)
		if !slices.Equal(b, c.want) {
			t.Errorf("load %v, u %g: bias %v → %v, want %v", c.load, c.u, c.b, b, c.want)
		}
	}
}

// A model's biases: zero at the start, set and read by block, moved by
// UpdateExpertBias at the configured rate; the routing follows them
// (forward and backward select alike: TestMoEGradient's biased case);
// refused for a dense block and with the bias off.
func TestExpertBiasModel(t *testing.T) {
	cfg := moeShared
	cfg.RouterExpertBias, cfg.RouterBiasUpdateRate = true, 0.25
	m, p, s, _ := setup(t, cfg, 2, 1)
	if b := m.ExpertBias(1); !slices.Equal(b, make([]float32, 4)) {
		t.Fatalf("initial bias %v", b)
	}
	if m.ExpertBias(0) != nil || m.SetExpertBias(0, make([]float32, 4)) == nil {
		t.Errorf("dense block 0 has a bias")
	}
	if err := m.SetExpertBias(1, make([]float32, 3)); err == nil {
		t.Errorf("a bias of 3 values for 4 experts was taken")
	}
	batch := randomBatch(cfg, 2, 3)
	if _, err := m.Forward(p, s, batch); err != nil {
		t.Fatal(err)
	}
	before := routingKey(m, s)
	st := m.TakeExpertStats()
	if err := m.SetExpertBias(1, []float32{0, 0, 0, 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forward(p, s, batch); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(before, routingKey(m, s)) {
		t.Errorf("a bias of 10 on expert 3 changed no routing")
	}
	if got := m.TakeExpertStats(); got.Load[0][3] != int64(2*cfg.SeqLen) {
		t.Errorf("block 1 with expert 3's bias 10: loads %v, want every token on expert 3", got.Load[0])
	}
	if err := m.UpdateExpertBias(st.Layers, st.Load); err != nil {
		t.Fatal(err)
	}
	for i, l := range st.Layers {
		b := m.ExpertBias(l)
		var sum int64
		for _, v := range st.Load[i] {
			sum += v
		}
		for e, v := range st.Load[i] {
			want := float32(0)
			if i == 0 {
				want = []float32{0, 0, 0, 10}[e]
			}
			switch d := sum - 4*v; {
			case d > 0:
				want += 0.25
			case d < 0:
				want -= 0.25
			}
			if b[e] != want {
				t.Errorf("block %d expert %d: load %d of %d, bias %g, want %g", l, e, v, sum, b[e], want)
			}
		}
	}
	off := moeShared
	mo, _, _, _ := setup(t, off, 2, 1)
	if mo.ExpertBias(1) != nil || mo.UpdateExpertBias(st.Layers, st.Load) != nil {
		t.Errorf("router_expert_bias off: a bias")
	}
}

// TestMoEBiasGradient: with a bias set (setTestBias) the backward routes
// as the forward did: every gradient of tiny MoE Llamas, softmax and
// sigmoid, against central differences.
func TestMoEBiasGradient(t *testing.T) {
	sig := tinyMoE
	sig.RouterScore = "sigmoid"
	for _, cfg := range []Config{tinyMoE, sig} {
		cfg.RouterExpertBias = true
		t.Run(fmt.Sprint(cfg.RouterScore), func(t *testing.T) { wholeModelGradient(t, cfg, false) })
	}
}
