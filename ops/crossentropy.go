package ops

// CrossEntropyForward fuses softmax with the cross-entropy loss:
//
//	probs[n,:] = softmax(logits[n,:])
//	losses[n]  = −log probs[n, targets[n]]  = logZ_n − logits[n, t_n]
//	returns      (1/N)·Σ_n losses[n]         (summed in float64)
//
// The loss is computed from the log-normaliser, not from the rounded
// probability, so it stays accurate when a probability underflows. probs
// may alias logits.
//
//	probs, logits (N,V)   losses (N)   targets (N), each in [0, V)
func CrossEntropyForward(k *Kernels, probs, losses, logits []float32, targets []int32, N, V int) float32 {
	v := k.simd()
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			row := logits[n*V : n*V+V]
			lt := row[targets[n]]
			m, logZ := softmaxRow(v, probs[n*V:n*V+V], row, 1)
			losses[n] = logZ + m - lt
		}
	})
	var s float64
	for _, l := range losses[:N] {
		s += float64(l)
	}
	return float32(s / float64(N))
}

// CrossEntropyBackward ACCUMULATES the gradient of dloss·mean(losses) with
// respect to the logits:
//
//	dlogits[n,v] += (probs[n,v] − [v = targets[n]])·dloss/N
//
//	dlogits, probs (N,V)   targets (N)
func CrossEntropyBackward(k *Kernels, dlogits, probs []float32, targets []int32, dloss float32, N, V int) {
	g := dloss / float32(N)
	v := k.simd()
	k.Parallel(N, func(lo, hi int) {
		for n := lo; n < hi; n++ {
			d := dlogits[n*V : n*V+V]
			rowAxpy(v, d, probs[n*V:n*V+V], g)
			d[targets[n]] -= g
		}
	})
}
