package plan

import (
	"fmt"
	"slices"
	"sort"
)

// AttnTable is the measured cost of the Trellis engine's two attention
// cores — flash (ops.FlashAttentionForward/Backward) and the
// materialising one (ops.AttentionForward/Backward, "dense") — as
// seconds per causal score of one head, S = T·(T+1)/2 scores for T
// queries, by sequence length Seq[i] and head size Head[j]: Cost[k][i][j]
// for the kernel and pass k (AttnFlashFwd … AttnDenseBwd). `trellis
// profile` times the kernels at these shapes.
//
// On the engine's CPU kernels neither core is a GEMM at the planner's
// GEMM efficiency: each runs blocks of query rows against the keys up to
// the diagonal with a softmax in cache, and pays per query row beside its
// FLOPs (the diagonal tile's masked keys, the online softmax's finish,
// the output's rescaling). A cost per score is then
//
//	c(T, d) = a(d) + b(d)/T
//
// (b the per-row cost over half a row's scores), so Score interpolates
// linearly in 1/T between the measured lengths and extrapolates so below
// the shortest (the per-row part grows); above the longest it holds the
// longest's cost (the memory effects of long rows are not extrapolated).
// In the head size it is linear (the FLOPs per score are 4·d),
// extrapolated past the ends. `trellis profile` measures T = 64 … 1,024
// in octaves and head sizes 16, 32, 64 and 128; on an Intel Xeon (AVX-512,
// one thread) the table then gave the timings between its points within
// 2% (T 96 … 384, head size 96), the materialising backward within 8% at
// T = 384 and 14% at 768 (its (T, T) probabilities leave the caches), and
// 7–15% below the table (T = 48) or above it (1,536); the efficiency
// model it replaces for engine clusters (attn_efficiency, and the
// materialising core's GEMMs and memory passes) priced the grid job's
// cores (T = 128, head size 32) at 1.45× the measured time for flash
// and 5.1× for the materialising core on that Xeon, and flash at 0.75×
// on a Zen 4 (docs/BENCHMARKS.md).
type AttnTable struct {
	Seq  []int // ascending sequence lengths
	Head []int // ascending head sizes
	// Cost[k][i][j]: seconds per causal score at Seq[i], Head[j].
	Cost [AttnKinds][][]float64
}

// The kernels and passes of an AttnTable.
const (
	AttnFlashFwd = iota
	AttnFlashBwd
	AttnDenseFwd
	AttnDenseBwd
	AttnKinds
)

// AttnTableKey is the cluster file's name of table k (device.attention).
func AttnTableKey(k int) string {
	return [AttnKinds]string{"flash_fwd", "flash_bwd", "dense_fwd", "dense_bwd"}[k]
}

// Validate checks the table's shape and values; name prefixes the
// fields in errors (device.attention).
func (t *AttnTable) Validate(name string) error {
	for _, ax := range []struct {
		key string
		v   []int
	}{{"seq", t.Seq}, {"head", t.Head}} {
		if len(ax.v) == 0 {
			return fmt.Errorf("%s.%s: must list at least one value", name, ax.key)
		}
		if !sort.IntsAreSorted(ax.v) || ax.v[0] < 1 {
			return fmt.Errorf("%s.%s=%v: must be positive and ascending", name, ax.key, ax.v)
		}
		for i := 1; i < len(ax.v); i++ {
			if ax.v[i] == ax.v[i-1] {
				return fmt.Errorf("%s.%s=%v: must not repeat a value", name, ax.key, ax.v)
			}
		}
	}
	for k, c := range t.Cost {
		key := name + "." + AttnTableKey(k)
		if len(c) != len(t.Seq) {
			return fmt.Errorf("%s: has %d rows: must have one per seq (%d)", key, len(c), len(t.Seq))
		}
		for i, row := range c {
			if len(row) != len(t.Head) {
				return fmt.Errorf("%s: row %d has %d values: must have one per head (%d)", key, i, len(row), len(t.Head))
			}
			for _, v := range row {
				if !(v > 0 && v < 1e-3) {
					return fmt.Errorf("%s: %g ns per score: must be positive and under 1e6", key, v*1e9)
				}
			}
		}
	}
	return nil
}

// Covers says whether the table prices head size d: a head size it
// measured, or a multiple of 32 (FlashHeadTiled), which every ISA's
// kernels run on the tiled path the table's columns of 32, 64 and 128
// measured, interpolated between them. Other head sizes run the kernels'
// blocked path, which the tiled columns do not price: before head size
// 16 was measured, the efficiency model priced an 8-layer h = 64 job of
// that head size (dp=2,pp=2,zero=1) at 19.9 ms a step against 14.8
// measured (docs/BENCHMARKS.md, "Waits that poll").
func (t *AttnTable) Covers(d int) bool { return slices.Contains(t.Head, d) || FlashHeadTiled(d) }

// Score is the cost of one causal score of kernel and pass k at sequence
// length T and head size d (seconds): bilinear in (1/T, d) over the
// table, as the type's comment says.
func (t *AttnTable) Score(k, T, d int) float64 {
	i, fi := bracket(t.Seq, T, true)
	j, fj := bracket(t.Head, d, false)
	at := func(i int) float64 {
		row := t.Cost[k][i]
		if len(t.Head) == 1 {
			return row[0]
		}
		return row[j] + fj*(row[j+1]-row[j])
	}
	if len(t.Seq) == 1 {
		return max(at(0), 0)
	}
	return max(at(i)+fi*(at(i+1)-at(i)), 0)
}

// bracket finds the segment [xs[i], xs[i+1]] of x and its fraction f
// along it (extrapolating past the ends: f < 0 or f > 1), linear in 1/x
// when inverse; above the last value of an inverse axis it holds (f = 1).
func bracket(xs []int, x int, inverse bool) (int, float64) {
	if len(xs) == 1 {
		return 0, 0
	}
	i := sort.SearchInts(xs, x) - 1
	i = min(max(i, 0), len(xs)-2)
	u, lo, hi := float64(x), float64(xs[i]), float64(xs[i+1])
	if inverse {
		if x >= xs[len(xs)-1] {
			return len(xs) - 2, 1
		}
		u, lo, hi = 1/u, 1/lo, 1/hi
	}
	return i, (u - lo) / (hi - lo)
}

// Core is the attention core's forward and backward time for `heads`
// heads of T queries at head size d (flash or materialising) from the
// table: heads·T·(T+1)/2 scores at Score's cost.
func (t *AttnTable) Core(flash bool, heads float64, T, d int) passTime {
	f, b := AttnDenseFwd, AttnDenseBwd
	if flash {
		f, b = AttnFlashFwd, AttnFlashBwd
	}
	s := heads * float64(T) * float64(T+1) / 2
	return passTime{fwd: s * t.Score(f, T, d), bwd: s * t.Score(b, T, d)}
}
