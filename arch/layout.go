package arch

// Tensor is one named parameter tensor inside a rank's flat parameter
// vector.
type Tensor struct {
	Name   string // e.g. "h.0.attn.c_attn.weight"
	Shape  []int  // row-major, the rank's local shape
	Offset int    // of its first element in the flat vector (not unit-relative)
	Size   int    // number of elements, the product of Shape
	// Global places a tensor-parallel rank's tensor in the global one
	// (see Split); the zero value is the whole tensor.
	Global Slice
	// Replicated: every rank of the tensor-parallel group holds the same
	// copy (always false without tensor parallelism).
	Replicated bool
	// Expert: a stack of an MoE layer's routed experts' matrices (its
	// first dimension the experts), split over the expert-parallel group
	// (Part.EP) and reduced over the expert-data-parallel one.
	Expert bool
}

// Unit is a group of tensors that is fetched, released and reduced
// together: the embedding, one block, the final norm.
type Unit struct {
	Name    string // "embedding", "h.0", ..., "ln_f"
	Index   int    // the global unit number (see Layout)
	Offset  int    // of its first element in the flat vector
	Size    int
	Tensors []Tensor
}

// Layout is the order of a flat fp32 parameter vector. The model's units
// are numbered
//
//	unit 0      embedding (and the tied LM head)
//	unit 1..L   block l−1, prefix "h.{l−1}." (a Llama's "layers.{l−1}.")
//	unit L+1    the final norm (and an untied LM head)
//
// A rank's layout holds a part of every tensor (Config.PartLayout) and,
// in a pipeline, only some units (Select): Units[i].Index is the global
// number, which is what the model's passes and Params speak.
type Layout struct {
	Units []Unit
	Size  int // number of elements
}

// PartLayout returns the layout of the parameters part p of c holds: every
// unit, each tensor with its local shape, its place in the global tensor
// (Global) and whether every rank of the tensor-parallel group holds the
// same copy (Replicated). c and p must be valid. The zero Part gives the
// whole model, whose tensors are whole and not Replicated.
func (c Config) PartLayout(p Part) Layout {
	var lay Layout
	specs := c.params()
	for u, us := range specs {
		un := Unit{Name: us.name, Index: u, Offset: lay.Size}
		for _, ts := range us.tensors {
			t := ts.place(p)
			t.Offset = lay.Size
			lay.Size += t.Size
			un.Tensors = append(un.Tensors, t)
		}
		un.Size = lay.Size - un.Offset
		lay.Units = append(lay.Units, un)
	}
	return lay
}

// Layout is the layout of the whole model, PartLayout(Part{}).
func (c Config) Layout() Layout { return c.PartLayout(Part{}) }

// Select is the layout of the given global units alone (ascending, each
// once), laid out back to back in that order: a pipeline rank's.
func (l Layout) Select(units []int) Layout {
	var out Layout
	for _, u := range units {
		src := l.Units[u]
		un := Unit{Name: src.Name, Index: src.Index, Offset: out.Size, Size: src.Size}
		for _, t := range src.Tensors {
			t.Offset += out.Size - src.Offset
			un.Tensors = append(un.Tensors, t)
		}
		out.Size += src.Size
		out.Units = append(out.Units, un)
	}
	return out
}

// Unit is the unit of global number u, if the layout holds it.
func (l Layout) Unit(u int) (Unit, bool) {
	for _, un := range l.Units {
		if un.Index == u {
			return un, true
		}
	}
	return Unit{}, false
}

// Tensor finds a tensor by name.
func (l Layout) Tensor(name string) (Tensor, bool) {
	for _, u := range l.Units {
		for _, t := range u.Tensors {
			if t.Name == name {
				return t, true
			}
		}
	}
	return Tensor{}, false
}

// Indices are the global numbers of the layout's units, in order.
func (l Layout) Indices() []int {
	out := make([]int, len(l.Units))
	for i, u := range l.Units {
		out[i] = u.Index
	}
	return out
}

// View cuts a unit's buffer (its Size elements, in Tensors order) into one
// slice per tensor.
func View[E any](u Unit, buf []E) [][]E {
	out := make([][]E, len(u.Tensors))
	for i, t := range u.Tensors {
		o := t.Offset - u.Offset
		out[i] = buf[o : o+t.Size : o+t.Size]
	}
	return out
}

// GlobalShape is the shape of the global tensor a local tensor is part of
// (its own shape when it is whole).
func (t Tensor) GlobalShape(global Layout) []int {
	g, _ := global.Tensor(t.Name)
	return g.Shape
}

// Valid is the number of the tensor's elements that are weights (the rest
// is padding).
func (t Tensor) Valid() int {
	if t.Global.Whole() {
		return t.Size
	}
	return t.Global.Elems()
}

// LargestUnit is the size of part p's largest unit — the embedding, a
// block or the head (all blocks are alike) — in parameters, for any
// number of layers without building the whole layout (an MoE model's
// largest block, MoE or dense).
func (c Config) LargestUnit(p Part) float64 {
	one := c
	one.Layers, one.DenseFirst = 1, 0
	n := 0
	for _, u := range one.PartLayout(p).Units {
		n = max(n, u.Size)
	}
	if c.Experts > 0 { // an MoE model's dense blocks too
		one.DenseFirst = 1
		for _, u := range one.PartLayout(p).Units {
			n = max(n, u.Size)
		}
	}
	return float64(n)
}
