package ops

import "fmt"

// Layout says which operands of a matmul are stored transposed.
type Layout uint8

// The layouts training needs. With a linear layer y = x·Wᵀ, W (OC, C):
//
//	NN: C(M,N) = A(M,K)·B(K,N)      backward to the input:  dx += dy·W
//	NT: C(M,N) = A(M,K)·B(N,K)ᵀ     forward:                y = x·Wᵀ
//	TN: C(M,N) = A(K,M)ᵀ·B(K,N)     backward to the weight: dW += dyᵀ·x
const (
	NN Layout = iota
	NT
	TN
)

func (l Layout) String() string {
	switch l {
	case NN:
		return "nn"
	case NT:
		return "nt"
	case TN:
		return "tn"
	}
	return fmt.Sprintf("layout(%d)", uint8(l))
}

// ParseLayout accepts nn, nt and tn.
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "nn":
		return NN, nil
	case "nt":
		return NT, nil
	case "tn":
		return TN, nil
	}
	return 0, fmt.Errorf("ops: unknown layout %q (want nn, nt or tn)", s)
}

// resolveISA maps a requested ISA ("", "auto", "avx512", "avx2" or
// "generic") to the micro-kernel this CPU runs: the best one for "" and
// "auto", an error when the CPU lacks the one named.
func resolveISA(req string) (*gemmImpl, error) {
	switch req {
	case "", "auto":
		if impls := archImpls(); len(impls) > 0 {
			return impls[0], nil
		}
		return genericImpl(), nil
	case "generic":
		return genericImpl(), nil
	case "avx512", "avx2":
		for _, g := range archImpls() {
			if g.name == req {
				return g, nil
			}
		}
		return nil, fmt.Errorf("ops: isa=%q: this CPU (or build) does not support it", req)
	}
	return nil, fmt.Errorf("ops: unknown ISA %q (want auto, avx512, avx2 or generic)", req)
}

// opElems returns op(A)[i,p] and op(B)[p,j] for layout l.
func opElems(l Layout, i, j, p int, a []float32, lda int, b []float32, ldb int) (float32, float32) {
	switch l {
	case NT:
		return a[i*lda+p], b[j*ldb+p]
	case TN:
		return a[p*lda+i], b[p*ldb+j]
	}
	return a[i*lda+p], b[p*ldb+j]
}

// matmulRef is the plain triple loop, the reference the fast paths are
// tested against.
func matmulRef(l Layout, m, n, kk int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < kk; p++ {
				av, bv := opElems(l, i, j, p, a, lda, b, ldb)
				s += av * bv
			}
			if accumulate {
				c[i*ldc+j] += s
			} else {
				c[i*ldc+j] = s
			}
		}
	}
}
