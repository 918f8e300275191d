// Package rng is Trellis's counter-based random number generator.
//
// Every random value is a pure function of (key, counter): the generator is
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), a 10-round bijection of a 128-bit counter under a 64-bit key. There
// is no sequential state, so element i of a tensor is computed independently
// of every other element: a rank that owns elements [lo, hi) of a parameter
// draws exactly the values a single device would draw for them. This is what
// makes every sharding of the model start from the same global weights, and
// every dropout mask independent of how the batch is split.
//
// A Stream is a key. Key(seed, name) derives one from a seed and a name
// ("h.3.mlp.c_fc.weight", "dropout.h.3.attn"); Sub derives child keys
// (a step, a layer) from it. Values are addressed by a 64-bit index:
//
//	block j = Philox(key, counter = (j_lo, j_hi, 0, 0)) = 4 uint32 words
//	Uint32(i)  = word i%4 of block i/4
//	Uniform(i) = (Uint32(i) >> 8) · 2⁻²⁴                       ∈ [0, 1)
//	Normal(i)  = Box–Muller on the word pair (2p, 2p+1) of block i/4, p = (i/2)%2:
//	             u1 = (w[2p]+½)·2⁻³², u2 = (w[2p+1]+½)·2⁻³², r = √(−2 ln u1),
//	             Normal(i) = r·cos(2πu2) for even i, r·sin(2πu2) for odd i.
//
// The Fill functions compute the same values in bulk, one Philox block per
// four elements.
package rng

import (
	"math"
	"math/bits"
)

// Philox4x32 round constants (Random123).
const (
	mulA   = 0xD2511F53
	mulB   = 0xCD9E8D57
	weylA  = 0x9E3779B9
	weylB  = 0xBB67AE85
	rounds = 10
)

// Philox4x32 applies the 10-round Philox bijection to counter ctr under key.
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for r := 0; r < rounds; r++ {
		hi0, lo0 := bits.Mul32(mulA, c0)
		hi1, lo1 := bits.Mul32(mulB, c2)
		c0, c1, c2, c3 = hi1^c1^k0, lo1, hi0^c3^k1, lo0
		k0 += weylA // the key schedule: bumped after every round
		k1 += weylB
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Stream is a Philox key: the identity of one family of random values.
// It is a small value type; copy it freely.
type Stream struct {
	key [2]uint32
}

// splitmix64 is the SplitMix64 finaliser, used only to derive keys.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func fromUint64(k uint64) Stream { return Stream{key: [2]uint32{uint32(k), uint32(k >> 32)}} }

func (s Stream) uint64() uint64 { return uint64(s.key[0]) | uint64(s.key[1])<<32 }

// Key derives the stream for (seed, name): the key is
// SplitMix64(seed ⊕ SplitMix64(FNV-1a-64(name))).
func Key(seed uint64, name string) Stream {
	h := uint64(14695981039346656037) // FNV-1a offset basis
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return fromUint64(splitmix64(seed ^ splitmix64(h)))
}

// Sub derives a child stream keyed by x (a step, a layer, a site): the key is
// SplitMix64(key ⊕ SplitMix64(x + 1)). Distinct x give unrelated streams.
func (s Stream) Sub(x uint64) Stream {
	return fromUint64(splitmix64(s.uint64() ^ splitmix64(x+1)))
}

// Block returns the four words of block j.
func (s Stream) Block(j uint64) [4]uint32 {
	return Philox4x32([4]uint32{uint32(j), uint32(j >> 32), 0, 0}, s.key)
}

// Uint32 is the random word at index i.
func (s Stream) Uint32(i uint64) uint32 { return s.Block(i >> 2)[i&3] }

// Uniform is the float32 in [0, 1) at index i (24 random bits).
func (s Stream) Uniform(i uint64) float32 { return ToUniform(s.Uint32(i)) }

// Normal is the standard normal value at index i (see the package comment).
func (s Stream) Normal(i uint64) float64 {
	w := s.Block(i >> 2)
	p := (i >> 1) & 1
	z0, z1 := boxMuller(w[2*p], w[2*p+1])
	if i&1 == 0 {
		return z0
	}
	return z1
}

// ToUniform maps a random word to [0, 1) as Uniform does: (w>>8)·2⁻²⁴.
func ToUniform(w uint32) float32 { return float32(w>>8) * (1.0 / (1 << 24)) }

// boxMuller maps two words to two independent standard normals.
func boxMuller(a, b uint32) (float64, float64) {
	u1 := (float64(a) + 0.5) * (1.0 / (1 << 32)) // (0, 1): log is finite
	u2 := (float64(b) + 0.5) * (1.0 / (1 << 32))
	r := math.Sqrt(-2 * math.Log(u1))
	sin, cos := math.Sincos(2 * math.Pi * u2)
	return r * cos, r * sin
}
