package model

import (
	"fmt"
	"slices"
	"testing"
)

// tinyMoE is the MoE Llama of the whole-model tests: 4 experts of width
// 6, top-2, the aux loss on.
var tinyMoE = Config{Arch: "llama", Layers: 2, Hidden: 12, Heads: 6, KVHeads: 2, FFN: 20, SeqLen: 5, Vocab: 11, RopeTheta: 100,
	Experts: 4, TopK: 2, ExpertFFN: 6, AuxLoss: 0.05}

// moeShared has a dense first block and a shared expert; moeCapped a
// capacity below one (fewer dispatched rows than n·k).
var (
	moeShared = Config{Arch: "llama", Layers: 3, Hidden: 12, Heads: 6, KVHeads: 2, FFN: 20, SeqLen: 5, Vocab: 11,
		Experts: 4, TopK: 2, ExpertFFN: 6, SharedExperts: 1, DenseFirst: 1, AuxLoss: 0.01}
	moeCapped = Config{Arch: "llama", Layers: 2, Hidden: 8, Heads: 2, FFN: 12, SeqLen: 5, Vocab: 11,
		Experts: 3, TopK: 2, ExpertFFN: 10, CapacityFactor: 0.5}
)

// TestRoute holds the routing to its rules: the top-k by probability with
// ties to the lower index, GShard's capacity priority (every first choice
// before any second) and rows grouped by expert in that order.
func TestRoute(t *testing.T) {
	const N, E, K = 3, 3, 2
	probs := []float32{
		0.4, 0.4, 0.2, // tie: expert 0 first, then 1
		0.1, 0.3, 0.6, // 2, 1
		0.5, 0.2, 0.3, // 0, 2
	}
	mk := func() routing {
		return routing{experts: make([]int32, N*K), rows: make([]int32, N*K), gates: make([]float32, N*K), load: make([]int32, E), offs: make([]int32, E+1)}
	}
	r := mk()
	route(&r, probs, nil, N, E, K, 0)
	if want := []int32{0, 1, 2, 1, 0, 2}; !slices.Equal(r.experts, want) {
		t.Errorf("experts %v, want %v", r.experts, want)
	}
	if want := []float32{0.4, 0.4, 0.6, 0.3, 0.5, 0.3}; !slices.Equal(r.gates, want) {
		t.Errorf("gates %v, want %v", r.gates, want)
	}
	// expert 0: t0 (1st), t2 (1st); expert 1: t0 (2nd), t1 (2nd); expert 2: t1 (1st), t2 (2nd)
	if want := []int32{0, 2, 4, 3, 1, 5}; !slices.Equal(r.rows, want) {
		t.Errorf("rows %v, want %v", r.rows, want)
	}
	if want := []int32{0, 2, 4, 6}; !slices.Equal(r.offs, want) || r.kept() != 6 {
		t.Errorf("offsets %v, want %v", r.offs, want)
	}
	// Capacity 1: expert 0 keeps t0's first choice (t2's is dropped),
	// expert 2 t1's first (t2's second dropped), expert 1 t0's second.
	r = mk()
	route(&r, probs, nil, N, E, K, 1)
	if want := []int32{0, 1, 2, -1, -1, -1}; !slices.Equal(r.rows, want) {
		t.Errorf("capacity 1: rows %v, want %v", r.rows, want)
	}
	if want := []int32{2, 2, 2}; !slices.Equal(r.load, want) {
		t.Errorf("capacity 1: load %v, want %v (before capacity)", r.load, want)
	}
}

// TestMoEGradient checks every parameter gradient of tiny MoE Llamas —
// every layer MoE, a dense first layer with a shared expert, capacity
// with dropped tokens, a sigmoid router (its gates normalised over the
// chosen 3) — against central differences of the loss plus the
// aux losses (wholeModelGradient), with and without dropout.
func TestMoEGradient(t *testing.T) {
	dense1 := tinyMoE
	dense1.DenseFirst, dense1.SharedExperts = 1, 1
	capped := tinyMoE
	capped.CapacityFactor = 0.6
	sigmoid := capped
	sigmoid.RouterScore, sigmoid.TopK = "sigmoid", 3
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"dropless", tinyMoE}, {"dense first, shared", dense1}, {"capacity", capped}, {"sigmoid top-3, capacity", sigmoid}} {
		for _, dropout := range []float64{0, 0.2} {
			t.Run(fmt.Sprintf("%s/dropout=%v", c.name, dropout), func(t *testing.T) {
				cfg := c.cfg
				cfg.Dropout = dropout
				wholeModelGradient(t, cfg, false)
			})
		}
	}
}

// TestMoEDrops: the capacity configuration of TestMoEGradient drops
// assignments (so that its gradient check covers dropped tokens), and the
// loads count every assignment.
func TestMoEDrops(t *testing.T) {
	cfg := tinyMoE
	cfg.CapacityFactor = 0.6
	const B = 2
	m, p, s, _ := setup(t, cfg, B, 1)
	perturb(p.W, 0.3, 5)
	if _, err := m.Forward(p, s, randomBatch(cfg, B, 3)); err != nil {
		t.Fatal(err)
	}
	st := m.TakeExpertStats()
	if !slices.Equal(st.Layers, []int{0, 1}) {
		t.Fatalf("MoE layers %v", st.Layers)
	}
	n := B * cfg.SeqLen
	for i := range st.Layers {
		var load, drop int64
		for e := range st.Load[i] {
			load += st.Load[i][e]
			drop += st.Dropped[i][e]
		}
		kept := int64(cfg.Routed(n, 1))
		if load != int64(n*cfg.TopK) || drop < load-kept || drop == 0 {
			t.Errorf("layer %d: load %d (want %d), dropped %d (at least %d, some)", i, load, n*cfg.TopK, drop, load-kept)
		}
	}
	if st.Aux <= 0 {
		t.Errorf("aux loss %g", st.Aux)
	}
	if again := m.TakeExpertStats(); again.Load[0][0] != 0 || again.Aux != 0 {
		t.Errorf("TakeExpertStats did not reset: %+v", again)
	}
}
