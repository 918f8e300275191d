package model

// TPComm is where a tensor-parallel rank meets the other ranks of its
// group: the named communication points of Megatron's layers (f and g) and
// of sequence parallelism. parallel/tp implements it over a comm.Group;
// the model calls it and never talks to the network itself. Every rank of
// the group makes the same calls in the same order.
//
// In Megatron's notation, a column-parallel layer is entered through f
// (forward: identity, the input is replicated; backward: ReduceFromTP of
// the input gradient) and a row-parallel layer is left through g (forward:
// ReduceFromTP of the partial outputs; backward: identity). Sequence
// parallelism replaces f's forward by GatherSeq (backward ScatterSeq) and
// g's forward by ScatterSeq (backward GatherSeq).
type TPComm interface {
	// ReduceFromTP sums x over the group in place: x ← Σ_ranks x.
	ReduceFromTP(x []float32) error
	// MaxOverTP takes the elementwise maximum over the group in place.
	MaxOverTP(x []float32) error
	// GatherSeq concatenates every rank's src in rank order:
	// dst[r·n:(r+1)·n] = src of rank r, len(dst) = t·len(src) = t·n.
	GatherSeq(dst, src []float32) error
	// ScatterSeq sums src over the group and keeps this rank's chunk:
	// dst = Σ_ranks src[r·n:(r+1)·n], len(src) = t·len(dst) = t·n.
	ScatterSeq(dst, src []float32) error
	// StartReduceFromTP and StartScatterSeq issue the same operations and
	// return at once with the function that waits for them; the buffers
	// must not be touched until it has returned. The backward pass
	// overlaps f's input-gradient reduction with the weight gradient.
	StartReduceFromTP(x []float32) (wait func() error)
	StartScatterSeq(dst, src []float32) (wait func() error)
}

// soloTP is the group of one rank: every point is the identity.
type soloTP struct{}

func (soloTP) ReduceFromTP([]float32) error        { return nil }
func (soloTP) MaxOverTP([]float32) error           { return nil }
func (soloTP) GatherSeq(dst, src []float32) error  { copy(dst, src); return nil }
func (soloTP) ScatterSeq(dst, src []float32) error { copy(dst, src); return nil }
func (soloTP) StartReduceFromTP([]float32) func() error {
	return func() error { return nil }
}
func (soloTP) StartScatterSeq(dst, src []float32) func() error {
	copy(dst, src)
	return func() error { return nil }
}
