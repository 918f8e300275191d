package ops

import "math"

// exp32 is e^x in float32 to about 2 ulp (Cephes expf): x = n·ln2 + r with
// |r| <= ln2/2, e^r by a degree-7 polynomial, times 2^n by building the
// exponent bits. Inputs below -87.3 give 0 and above 88.7 give +Inf; NaN
// propagates.
func exp32(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	if x < -87.3 {
		return 0
	}
	if x > 88.7 {
		return float32(math.Inf(1))
	}
	fn := x*log2e + 0.5
	n := int32(fn)
	if fn < 0 && float32(n) != fn {
		n-- // floor
	}
	r := x - float32(n)*c1 - float32(n)*c2
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	p = p*r*r + r + 1
	return p * math.Float32frombits(uint32(n+127)<<23)
}

// tanh32 is tanh(x) in float32 to a few ulp: the odd/even rational minimax
// approximation x·P(x²)/Q(x²) used by Eigen's fast tanh, with the input
// clamped to ±7.905 (where tanh rounds to ±1) and x itself returned for
// |x| < 4e-4.
func tanh32(x float32) float32 {
	const clamp = 7.90531110763549805
	if x > clamp {
		x = clamp
	} else if x < -clamp {
		x = -clamp
	}
	if x < 4e-4 && x > -4e-4 {
		return x
	}
	x2 := x * x
	p := float32(-2.76076847742355e-16)
	p = p*x2 + 2.00018790482477e-13
	p = p*x2 - 8.60467152213735e-11
	p = p*x2 + 5.12229709037114e-08
	p = p*x2 + 1.48572235717979e-05
	p = p*x2 + 6.37261928875436e-04
	p = p*x2 + 4.89352455891786e-03
	q := float32(1.19825839466702e-06)
	q = q*x2 + 1.18534705686654e-04
	q = q*x2 + 2.26843463243900e-03
	q = q*x2 + 4.89352518554385e-03
	return x * p / q
}

// log32 is ln x in float32 to about 2 ulp (Cephes logf): x = 2^e·m with
// m in [√½, √2), ln m = f − f²/2 + f³·P(f) for f = m − 1, plus e·ln2 in
// two parts. Zero, negative, subnormal, infinite and NaN inputs go to
// math.Log.
func log32(x float32) float32 {
	if !(x >= 0x1p-126 && x <= math.MaxFloat32) {
		return float32(math.Log(float64(x)))
	}
	b := math.Float32bits(x)
	e := float32(int32(b>>23) - 127)
	m := math.Float32frombits(b&0x007fffff | 0x3f800000) // [1, 2)
	if m > math.Sqrt2 {
		m *= 0.5
		e++
	}
	f := m - 1
	z := f * f
	y := float32(7.0376836292e-2)
	y = y*f - 1.1514610310e-1
	y = y*f + 1.1676998740e-1
	y = y*f - 1.2420140846e-1
	y = y*f + 1.4249322787e-1
	y = y*f - 1.6668057665e-1
	y = y*f + 2.0000714765e-1
	y = y*f - 2.4999993993e-1
	y = y*f + 3.3333331174e-1
	y = y * f * z
	y += -2.12194440e-4 * e
	y += -0.5 * z
	return f + y + 0.693359375*e
}
