package arch

import (
	"fmt"
	"reflect"
	"testing"
)

// handPartLayout is GPT-2's layout under tensor parallelism as it was
// written out by hand before the declarations (model/part.go at ed1cb48):
// the declarations must derive exactly it, names, shapes, offsets, boxes
// and replication.
func handPartLayout(c Config, p Part) Layout {
	t, r := p.Degree(), p.Rank
	C, L := c.Hidden, c.Layers
	Cl, F := C/t, 4*C/t
	var lay Layout
	add := func(name string, ts ...Tensor) {
		u := Unit{Name: name, Index: len(lay.Units), Offset: lay.Size}
		for _, x := range ts {
			x.Size = 1
			for _, d := range x.Shape {
				x.Size *= d
			}
			x.Offset = lay.Size
			lay.Size += x.Size
			u.Tensors = append(u.Tensors, x)
		}
		u.Size = lay.Size - u.Offset
		lay.Units = append(lay.Units, u)
	}
	rep := func(name string, shape ...int) Tensor { return Tensor{Name: name, Shape: shape, Replicated: t > 1} }
	box := func(name string, shape, view, off, ext []int) Tensor {
		if t == 1 {
			return Tensor{Name: name, Shape: shape}
		}
		return Tensor{Name: name, Shape: shape, Global: Slice{View: view, Off: off, Ext: ext}}
	}
	vr := (c.Vocab + t - 1) / t
	vlo := r * vr
	vn := max(0, min(vr, c.Vocab-vlo))
	add("embedding", box("wte", []int{vr, C}, []int{c.Vocab, C}, []int{vlo, 0}, []int{vn, C}), rep("wpe", c.SeqLen, C))
	for l := 0; l < L; l++ {
		n := func(s string) string { return fmt.Sprintf("h.%d.%s", l, s) }
		add(fmt.Sprintf("h.%d", l),
			rep(n("ln_1.weight"), C), rep(n("ln_1.bias"), C),
			box(n("attn.c_attn.weight"), []int{3 * Cl, C}, []int{3, C, C}, []int{0, r * Cl, 0}, []int{3, Cl, C}),
			box(n("attn.c_attn.bias"), []int{3 * Cl}, []int{3, C}, []int{0, r * Cl}, []int{3, Cl}),
			box(n("attn.c_proj.weight"), []int{C, Cl}, []int{C, C}, []int{0, r * Cl}, []int{C, Cl}),
			rep(n("attn.c_proj.bias"), C),
			rep(n("ln_2.weight"), C), rep(n("ln_2.bias"), C),
			box(n("mlp.c_fc.weight"), []int{F, C}, []int{4 * C, C}, []int{r * F, 0}, []int{F, C}),
			box(n("mlp.c_fc.bias"), []int{F}, []int{4 * C}, []int{r * F}, []int{F}),
			box(n("mlp.c_proj.weight"), []int{C, F}, []int{C, 4 * C}, []int{0, r * F}, []int{C, F}),
			rep(n("mlp.c_proj.bias"), C))
	}
	add("ln_f", rep("ln_f.weight", C), rep("ln_f.bias", C))
	return lay
}

func TestPartLayoutFromDeclarations(t *testing.T) {
	for _, c := range []Config{
		{Layers: 2, Hidden: 24, Heads: 6, SeqLen: 7, Vocab: 259},
		{Layers: 3, Hidden: 96, Heads: 6, SeqLen: 32, Vocab: 256},
		{Layers: 1, Hidden: 8, Heads: 8, SeqLen: 3, Vocab: 5},
	} {
		for _, tp := range []int{1, 2, 3, 4, 6, 8} {
			if c.Heads%tp != 0 || (4*c.Hidden)%tp != 0 {
				continue
			}
			for r := 0; r < tp; r++ {
				p := Part{TP: tp, Rank: r}
				got, want := c.PartLayout(p), handPartLayout(c, p)
				if !reflect.DeepEqual(got, want) {
					for u := range want.Units {
						for i := range want.Units[u].Tensors {
							if g, w := got.Units[u].Tensors[i], want.Units[u].Tensors[i]; !reflect.DeepEqual(g, w) {
								t.Errorf("%v tp=%d rank %d: %+v, want %+v", c, tp, r, g, w)
							}
						}
					}
					t.Fatalf("%v tp=%d rank %d: layouts differ", c, tp, r)
				}
			}
		}
	}
}

func TestSelect(t *testing.T) {
	c := Config{Layers: 4, Hidden: 8, Heads: 2, SeqLen: 3, Vocab: 11}
	whole := c.Layout()
	sel := whole.Select([]int{0, 3, 4, 5})
	if got := sel.Indices(); !reflect.DeepEqual(got, []int{0, 3, 4, 5}) {
		t.Fatalf("indices %v", got)
	}
	off := 0
	for _, u := range sel.Units {
		src, _ := whole.Unit(u.Index)
		if u.Offset != off || u.Size != src.Size || u.Tensors[0].Offset != off || u.Tensors[0].Name != src.Tensors[0].Name {
			t.Errorf("unit %d at %d size %d, want %d %d", u.Index, u.Offset, u.Size, off, src.Size)
		}
		off += u.Size
	}
	if sel.Size != off {
		t.Errorf("size %d, want %d", sel.Size, off)
	}
	if _, ok := sel.Unit(1); ok {
		t.Error("unit 1 is not selected")
	}
}
