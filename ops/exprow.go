package ops

// ExpRow sets out[i] = e^(in[i]·scale − shift) and returns Σ out (exp32:
// about 2 ulp; out may be in): a softmax row's numerators, for attention
// kernels outside this package (the ring attention of model/ring.go).
func ExpRow(out, in []float32, scale, shift float32) float32 { return rowExp(out, in, scale, shift) }

// MaxRow is max_i x[i] (len(x) > 0).
func MaxRow(x []float32) float32 { return rowMax(x) }
