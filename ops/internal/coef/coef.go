// Package coef holds the constants and polynomial coefficients that both
// kernel generators emit (ops/vecgen's AVX-512 bodies, ops/avx2gen's AVX2
// ones): GELU's tanh form, Eigen's rational tanh and Cephes expf's
// polynomial. One definition, so the two bodies compute the same bits
// (ops.TestGELUAVX2), and the same as ops's scalar tanh32.
//
//	GELU(x) = ½·x·(1 + tanh(S·(x + K·x³)))
//	tanh(x) ≈ x·P(x²)/Q(x²), x clamped to ±Clamp
//	exp(r) ≈ 1 + r + r²·E(r) on the reduced argument, E = ExpPoly
//
// The coefficient lists are functions that return a fresh slice each
// call, so that no generator can change another's.
package coef

// S = √(2/π) and K = 0.044715.
const (
	S = 0.7978845608028654
	K = 0.044715
)

// Clamp bounds tanh's argument (beyond it the rational form is 1 in fp32).
const Clamp = 7.90531110763549805

// P and Q are the rational tanh's numerator's and denominator's
// coefficients, highest degree first.
func P() []float32 {
	return []float32{-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
		1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03}
}

// Q: see P.
func Q() []float32 {
	return []float32{1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03}
}

// ExpPoly is Cephes expf's polynomial, highest degree first.
func ExpPoly() []float32 {
	return []float32{1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1}
}
