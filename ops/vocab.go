package ops

import "math"

// The vocabulary-parallel cross-entropy (Megatron): each rank holds the
// logits of its V vocabulary columns of every row, the first valid of them
// real (the rest padding, which gets no probability). Without gathering
// the (N, V·t) logits, for each row n with target y_n:
//
//	M_n = max over the group of VocabRowMax            (the model's MaxOverTP)
//	S_n, Z_n − M_n: VocabExpSum, summed over the group (ReduceFromTP)
//	loss_n = log S_n − (Z_n − M_n), p = exp(z − M)/S:  VocabNormalize
//
// Rows are independent: threads split them.

// VocabRowMax sets mx[n] = max of the row's valid logits.
//
//	mx (N)   logits (N,V)
func (k *Kernels) VocabRowMax(mx, logits []float32, N, V, valid int) {
	v := k.simd() && valid > 0
	k.Parallel(N, func(a, b int) {
		for i := a; i < b; i++ {
			row := logits[i*V : i*V+valid]
			if v {
				rowMaxAVX512(&row[0], valid, &mx[i])
				continue
			}
			mv := float32(-math.MaxFloat32)
			for _, z := range row {
				mv = max(mv, z)
			}
			mx[i] = mv
		}
	})
}

// VocabExpSum replaces each row's valid logits by exp(z − mx[n]) (its
// padding by 0), sets sum[n] to their sum and tgt[n] to z[y_n] − mx[n]
// when the target y_n is one of the rank's ids [lo, lo+valid) (else 0).
//
//	sum, tgt, mx (N)   logits (N,V)   targets (N)
func (k *Kernels) VocabExpSum(sum, tgt, logits, mx []float32, targets []int32, lo, N, V, valid int) {
	v := k.simd()
	k.Parallel(N, func(a, b int) {
		for i := a; i < b; i++ {
			row := logits[i*V : (i+1)*V]
			tgt[i] = 0
			if j := int(targets[i]) - lo; j >= 0 && j < valid {
				tgt[i] = row[j] - mx[i]
			}
			sum[i] = expRow(v, row[:valid], row[:valid], mx[i])
			clear(row[valid:])
		}
	})
}

// VocabNormalize sets losses[n] = log sum[n] − tgt[n] and divides each
// row's valid exponentials by sum[n] (the probabilities), returning the
// mean loss (summed in row order, in float64).
//
//	losses, sum, tgt (N)   logits (N,V)
func (k *Kernels) VocabNormalize(losses, logits, sum, tgt []float32, N, V, valid int) float64 {
	v := k.simd() && valid > 0
	k.Parallel(N, func(a, b int) {
		for i := a; i < b; i++ {
			losses[i] = float32(math.Log(float64(sum[i]))) - tgt[i]
			inv := 1 / sum[i]
			row := logits[i*V : i*V+valid]
			if v {
				scaleRowsAVX512(&row[0], V, valid, 1, &inv)
				continue
			}
			rowScale(row, inv)
		}
	})
	var total float64
	for _, l := range losses[:N] {
		total += float64(l)
	}
	return total / float64(N)
}

// VocabLossBackward sets dlogits = (p − onehot(y))·g for the rank's
// columns: p·g everywhere (0 on the padding, whose p is 0), −g added at
// the target when the rank holds it.
//
//	dlogits, probs (N,V)   targets (N)
func (k *Kernels) VocabLossBackward(dlogits, probs []float32, targets []int32, lo, N, V, valid int, g float32) {
	k.Parallel(N, func(a, b int) {
		for i := a; i < b; i++ {
			dr, pr := dlogits[i*V:(i+1)*V], probs[i*V:(i+1)*V]
			for j := range dr {
				dr[j] = pr[j] * g
			}
			if j := int(targets[i]) - lo; j >= 0 && j < valid {
				dr[j] -= g
			}
		}
	})
}
