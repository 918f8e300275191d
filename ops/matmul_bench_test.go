package ops

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// mmBench is one benchmarked matmul: C(m,n) = op(A)·op(B) with op given by
// the layout, and strides (0 means minimal).
type mmBench struct {
	name          string
	l             Layout
	m, n, k       int
	lda, ldb, ldc int
}

// mmBenches returns the headline shape (m=1024, k=768, n=3072) in every
// layout, the linear layers of the reference model (B=8, T=256, C=256,
// V=512, so m = B·T = 2048) in every layout, and the per-head attention
// matmuls (T=256, HS=64) reading Q, K, V in place from the (B,T,3C) QKV
// tensor (row stride 3C=768).
func mmBenches() []mmBench {
	var out []mmBench
	all := []Layout{NN, NT, TN}
	for _, l := range all {
		out = append(out, mmBench{name: "1024x768x3072", l: l, m: 1024, k: 768, n: 3072})
	}
	for _, kn := range [][2]int{{256, 768}, {256, 256}, {256, 1024}, {1024, 256}, {256, 512}} {
		for _, l := range all {
			out = append(out, mmBench{name: fmt.Sprintf("2048x%dx%d", kn[0], kn[1]), l: l, m: 2048, k: kn[0], n: kn[1]})
		}
	}
	return append(out,
		mmBench{name: "att_qk", l: NT, m: 256, n: 256, k: 64, lda: 768, ldb: 768, ldc: 256}, // Q·Kᵀ
		mmBench{name: "att_v", l: NN, m: 256, n: 64, k: 256, lda: 256, ldb: 768, ldc: 256},  // att·V into (B,T,C)
		mmBench{name: "att_dv", l: TN, m: 256, n: 64, k: 256, lda: 256, ldb: 256, ldc: 768}, // attᵀ·dout into dQKV
	)
}

// strides fills the minimal strides left 0 and returns the element
// counts of the stored A, B and C.
func (s *mmBench) strides() (na, nb, nc int) {
	ar, ac, br, bc := s.m, s.k, s.k, s.n
	switch s.l {
	case NT:
		br, bc = s.n, s.k
	case TN:
		ar, ac = s.k, s.m
	}
	if s.lda == 0 {
		s.lda = ac
	}
	if s.ldb == 0 {
		s.ldb = bc
	}
	if s.ldc == 0 {
		s.ldc = s.n
	}
	return ar * s.lda, br * s.ldb, s.m * s.ldc
}

// BenchmarkMatMul reports GFLOP/s (2·m·n·k flops per call) per ISA, shape,
// layout and thread count. The headline: 1024x768x3072 on avx512, t1.
func BenchmarkMatMul(b *testing.B) {
	isas := []string{"generic"}
	for _, g := range archImpls() {
		isas = append(isas, g.name)
	}
	for _, isa := range isas {
		for _, threads := range []int{1, 2} {
			for _, s := range mmBenches() {
				b.Run(fmt.Sprintf("%s/%s/%v/t%d", isa, s.name, s.l, threads), func(b *testing.B) {
					k, err := New(Config{Threads: threads, ISA: isa})
					if err != nil {
						b.Fatal(err)
					}
					benchMatMul(b, k, s)
				})
			}
		}
	}
}

func benchMatMul(b *testing.B, k *Kernels, s mmBench) {
	na, nb, nc := s.strides()
	r := rand.New(rand.NewPCG(1, 1))
	a, bb, c := randSlice(r, na), randSlice(r, nb), make([]float32, nc)
	k.MatMul(s.l, s.m, s.n, s.k, a, s.lda, bb, s.ldb, c, s.ldc, false)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k.MatMul(s.l, s.m, s.n, s.k, a, s.lda, bb, s.ldb, c, s.ldc, false)
	}
	b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
