package arch

// unitSpec is one unit as an architecture declares it: its name and its
// tensors in flat order.
type unitSpec struct {
	name    string
	tensors []tensorSpec
}

// tensorSpec is one parameter tensor as an architecture declares it: its
// name, its global shape and its placement on the tensor-parallel axis.
// The layouts of every part (PartLayout) are derived from it, so the
// parameter list is written once per architecture.
type tensorSpec struct {
	name  string
	shape []int
	tp    Placement
	// expert: a stack of the experts' matrices (E, ·, ·), split on its
	// first dimension over the expert-parallel group (Part.EP).
	expert bool
}

// Placement is how a tensor lies on the tensor-parallel axis of t ranks:
// replicated (every rank holds the whole tensor), or sharded along one
// dimension of a view of it. The view regroups the tensor's row-major
// elements without moving them (c_attn's (3C, C) weight viewed as
// (3, C, C): [q | k | v], each split by heads); rank r holds the box
// [r·n/t, (r+1)·n/t) of dimension Dim (n = View[Dim]), or with Ceil the
// ⌈n/t⌉ rows from r·⌈n/t⌉, those past n padding (vocab-parallel
// embedding rows).
type Placement struct {
	Shard bool
	View  []int // nil: the tensor's own shape
	Dim   int
	Ceil  bool
}

func rep(name string, shape ...int) tensorSpec { return tensorSpec{name: name, shape: shape} }

// shard splits dimension dim of the tensor itself.
func shard(name string, dim int, shape ...int) tensorSpec {
	return tensorSpec{name: name, shape: shape, tp: Placement{Shard: true, Dim: dim}}
}

// shardView splits dimension dim of the tensor viewed as view.
func shardView(name string, view []int, dim int, shape ...int) tensorSpec {
	return tensorSpec{name: name, shape: shape, tp: Placement{Shard: true, View: view, Dim: dim}}
}

// place is the tensor as part p holds it (Offset left to the layout). An
// expert tensor (E, ·, ·) is split on its first dimension over the
// expert-parallel group as well: its box in the view takes E/ep experts
// from EPRank·E/ep and, under tp, the tensor-parallel split of Dim.
func (s tensorSpec) place(p Part) Tensor {
	t := Tensor{Name: s.name, Shape: append([]int(nil), s.shape...), Expert: s.expert}
	deg, r := p.Degree(), p.Rank
	ep := 1
	if s.expert {
		ep = p.EPDegree()
	}
	if deg > 1 && !s.tp.Shard {
		t.Replicated = true
	}
	view := s.tp.View
	if view == nil {
		view = s.shape
	}
	offs, exts := make([]int, len(view)), append([]int(nil), view...)
	if ep > 1 { // view[0] = shape[0] = E
		per := s.shape[0] / ep
		t.Shape[0] = per
		offs[0], exts[0] = p.EPRank*per, per
	}
	if deg > 1 && s.tp.Shard {
		n := view[s.tp.Dim]
		per, off, ext := n/deg, r*(n/deg), n/deg
		if s.tp.Ceil {
			per = (n + deg - 1) / deg
			off = r * per
			ext = max(0, min(per, n-off))
		}
		// The dimension g of the shape that holds the view's dimension
		// Dim: the first whose prefix product reaches the view's up to Dim.
		pv := 1
		for _, v := range view[:s.tp.Dim+1] {
			pv *= v
		}
		g, ps := 0, s.shape[0]
		for ps < pv {
			g++
			ps *= s.shape[g]
		}
		t.Shape[g] = s.shape[g] / n * per
		offs[s.tp.Dim], exts[s.tp.Dim] = off, ext
	}
	if ep > 1 || (deg > 1 && s.tp.Shard) {
		t.Global = Slice{View: append([]int(nil), view...), Off: offs, Ext: exts}
	}
	t.Size = 1
	for _, d := range t.Shape {
		t.Size *= d
	}
	return t
}
