package rng

// FillUniform sets dst[j] = Uniform(lo + j) for every j: the elements
// [lo, lo+len(dst)) of the stream's uniform sequence.
func (s Stream) FillUniform(dst []float32, lo uint64) {
	i := lo
	for j := 0; j < len(dst); {
		w := s.Block(i >> 2)
		for q := i & 3; q < 4 && j < len(dst); q++ {
			dst[j] = ToUniform(w[q])
			j++
			i++
		}
	}
}

// FillNormal sets dst[j] = mean + std·Normal(lo + j) (computed in float64,
// rounded once): the elements [lo, lo+len(dst)) of a N(mean, std²) tensor.
func (s Stream) FillNormal(dst []float32, lo uint64, mean, std float64) {
	i := lo
	for j := 0; j < len(dst); {
		w := s.Block(i >> 2)
		a0, a1 := boxMuller(w[0], w[1])
		b0, b1 := boxMuller(w[2], w[3])
		z := [4]float64{a0, a1, b0, b1}
		for q := i & 3; q < 4 && j < len(dst); q++ {
			dst[j] = float32(mean + std*z[q])
			j++
			i++
		}
	}
}
