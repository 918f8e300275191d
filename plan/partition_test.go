package plan

import (
	"fmt"
	"strings"
	"testing"
)

// The splits Meta, BigScience and Megatron-Core published, and the rule's
// edge cases.
func TestPartitionSplits(t *testing.T) {
	for _, c := range []struct {
		layers, pp, vpp int
		want            string // layers per rank, or "" when the split is refused
	}{
		{126, 16, 1, "7, 8 × 14, 7"}, // Llama 3 405B (Dubey et al. 2024, §3.3.2)
		{70, 12, 1, "5, 6 × 10, 5"},  // BLOOM (bigscience tr11 README)
		{96, 8, 1, "12 × 8"},         // even
		{126, 16, 4, "7, 8 × 14, 7"}, // 64 chunks of 2, the end chunks 1
		{126, 16, 8, "7, 8 × 14, 7"}, // 128 chunks of 1, the end chunks 0
		{10, 4, 1, "2, 3 × 2, 2"},
		{7, 8, 1, "1 × 7, 0"},    // the last stage only carries the output layer
		{6, 8, 1, "0, 1 × 6, 0"}, // the ends only carry the embedding and the output layer
		{5, 8, 1, ""},            // a middle stage would be empty
		{126, 16, 9, ""},
		{32, 4, 3, "8 × 4"}, // 12 chunks: 8 of 3 layers, the 4 end-most of 2, one per rank
	} {
		pt, ok := newPartition(c.layers, c.pp, c.vpp)
		if ok != (c.want != "") || splittable(c.layers, c.pp, c.vpp) != ok {
			t.Errorf("L=%d pp=%d vpp=%d: ok=%v, want %v", c.layers, c.pp, c.vpp, ok, c.want != "")
			continue
		}
		if !ok {
			continue
		}
		if got := strings.Split(pt.describe(), " (")[0]; got != c.want {
			t.Errorf("L=%d pp=%d vpp=%d: %s, want %s", c.layers, c.pp, c.vpp, got, c.want)
		}
		sum, most := 0, 0
		for k := 0; k < c.pp; k++ {
			sum += pt.count(k)
			most = max(most, pt.count(k))
		}
		if sum != c.layers || max(pt.first, pt.last, pt.mid) != most || pt.first != pt.count(0) || pt.last != pt.count(c.pp-1) {
			t.Errorf("L=%d pp=%d vpp=%d: counts sum to %d, most %d; summary %+v", c.layers, c.pp, c.vpp, sum, most, pt)
		}
	}
}

// memRanks must contain every rank that could be the most loaded: for each
// rank k < pp−1 there is a listed rank j ≤ k with at least k's layers.
func TestPartitionMemRanksCover(t *testing.T) {
	for L := 1; L <= 40; L++ {
		for pp := 1; pp <= 12; pp++ {
			for vpp := 1; vpp <= 4; vpp++ {
				pt, ok := newPartition(L, pp, vpp)
				if !ok {
					continue
				}
				for k := 0; k < pp-1; k++ {
					covered := false
					for _, r := range pt.memRanks {
						if r.rank <= k && r.layers >= pt.count(k) && r.layers == pt.count(r.rank) {
							covered = true
						}
					}
					if !covered {
						t.Fatalf("L=%d pp=%d vpp=%d: rank %d (%d layers) not covered by %v", L, pp, vpp, k, pt.count(k), pt.memRanks)
					}
				}
				if pp > 2 && pt.mid != pt.count(pt.midRank) {
					t.Fatalf("L=%d pp=%d vpp=%d: mid %d on rank %d holds %d", L, pp, vpp, pt.mid, pt.midRank, pt.count(pt.midRank))
				}
			}
		}
	}
}

// Llama 3 405B on 16 stages: the planner accepts the uneven split, the
// busiest stage (8 layers) sets the pace, and stage 1 (8 layers, 15
// micro-batches in flight) outweighs stage 0 (7 layers, 16) in memory.
func TestUnevenPipelineCosts(t *testing.T) {
	j := job(t, "llama3-405b", "dgx-h100", 8192, 8192, 2048)
	p := mustParse(t, "dp=64,tp=8,pp=16,sp=on,recompute=full,order=tp-cp-pp-dp")
	e, err := j.Evaluate(p)
	if err != nil {
		t.Fatal(err)
	}
	if e.Time.SlowStage == 0 || e.Time.SlowStage == 15 {
		t.Errorf("slowest stage %d: a middle stage holds 8 layers, the ends 7 plus a light embedding / output layer", e.Time.SlowStage)
	}
	pl := place(p, 8)
	lc, sp := j.layerCost(p, pl), j.shapeParams(p)
	mid, first := j.stage(p, pl, lc, sp, 1), j.stage(p, pl, lc, sp, 0)
	if r := mid.compute.total() / first.compute.total(); r < 8.0/7*0.98 || r > 8.0/7 {
		t.Errorf("stage 1 / stage 0 compute = %.3f, want about 8/7 less the embedding", r)
	}
	a := j.activations(p)
	m0, m1 := j.stageMemory(p, sp, a, 0, 7), j.stageMemory(p, sp, a, 1, 8)
	if m1.Act <= m0.Act || e.Memory.Total < m1.Total || e.Memory.Layers != 8 {
		t.Errorf("stage 1 act %s vs stage 0 %s; Memory picked stage %d (%d layers, %s)", Bytes(m1.Act), Bytes(m0.Act), e.Memory.Stage, e.Memory.Layers, Bytes(e.Memory.Total))
	}
	// Params sum to the model (plus the tied copy: none, Llama is untied).
	sum := 0.0
	for s := 0; s < 16; s++ {
		sum += j.stageParams(mustParse(t, "pp=16"), s)
	}
	within(t, "405B over 16 stages", sum, float64(j.Model.Params()), 1e-12)
	// The search uses the split too.
	f, _ := ParseFix("dp=64,tp=8,pp=16,cp=1,mbs=1,precision=bf16")
	res, err := j.Search(Options{Fix: f, Top: 1})
	if err != nil || len(res.Plans) != 1 {
		t.Fatalf("search with pp=16: %v, %v", err, res.Rejected)
	}
	if text := j.Explain(res.Plans[0].Plan, nil); !strings.Contains(text, "126 layers over 16 stages: 7, 8 × 14, 7") {
		t.Errorf("explain does not show the split:\n%s", text)
	}
}

func TestInterleaveDegrees(t *testing.T) {
	for _, c := range []struct {
		L, pp int
		want  string
	}{{126, 16, "[2 4 8]"}, {96, 8, "[2 3 4 6 12]"}, {70, 12, "[2 3 6]"}, {84, 2, "[2 3 6 7 14 21 42 43]"}} {
		if got := fmt.Sprint(interleaveDegrees(c.L, c.pp)); got != c.want {
			t.Errorf("L=%d pp=%d: %s, want %s", c.L, c.pp, got, c.want)
		}
	}
}
