package data

import "math/bits"

// mix is SplitMix64's finaliser: a bijection of uint64 whose output bits
// each depend on every input bit.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// hash combines a seed and a list of words into 64 random-looking bits; it
// is the counter-based generator behind the sample order and the synthetic
// tokens (no state, any element computable on its own).
func hash(seed uint64, words ...uint64) uint64 {
	h := mix(seed)
	for _, w := range words {
		h = mix(h ^ mix(w))
	}
	return h
}

// Domain tags keep the streams drawn from one seed independent.
const (
	tagPerm uint64 = iota + 1
	tagShift
	tagSynthetic
)

// permutation is a pseudo-random bijection of [0, n) computed element by
// element: a 4-round balanced Feistel network on the smallest even number
// of bits covering n, with cycle walking back into [0, n). It needs no
// memory, so an epoch over billions of windows costs nothing to set up, and
// any position of the order is computed in O(1) expected time (fewer than 4
// network evaluations on average, since the domain is < 4n).
type permutation struct {
	n    uint64
	half uint // bits per Feistel half
	mask uint64
	keys [4]uint64
}

func newPermutation(n uint64, seed uint64, epoch uint64) permutation {
	b := uint(bits.Len64(n - 1)) // bits to cover [0, n)
	if n <= 1 {
		b = 0
	}
	half := max((b+1)/2, 1)
	p := permutation{n: n, half: half, mask: 1<<half - 1}
	for r := range p.keys {
		p.keys[r] = hash(seed, tagPerm, epoch, uint64(r))
	}
	return p
}

// at returns the image of i, for i in [0, n).
func (p permutation) at(i uint64) uint64 {
	if p.n <= 1 {
		return 0
	}
	x := i
	for {
		x = p.feistel(x)
		if x < p.n {
			return x
		}
	}
}

// feistel is a bijection of [0, 2^(2·half)).
func (p permutation) feistel(x uint64) uint64 {
	l, r := x>>p.half, x&p.mask
	for _, k := range p.keys {
		l, r = r, l^(mix(r^k)&p.mask)
	}
	return l<<p.half | r
}
