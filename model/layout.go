package model

import "fmt"

// Tensor is one named parameter tensor inside the flat parameter vector.
type Tensor struct {
	Name   string // e.g. "h.0.attn.c_attn.weight"
	Shape  []int  // row-major
	Offset int    // of its first element in the flat vector (global, not unit-relative)
	Size   int    // number of elements, the product of Shape
	// Global places a tensor-parallel rank's tensor in the global one
	// (see PartLayout); the zero value is the whole tensor.
	Global Slice
	// Replicated: every rank of the tensor-parallel group holds the same
	// copy (always false without tensor parallelism).
	Replicated bool
}

// Unit is a group of tensors that is fetched, released and reduced together.
type Unit struct {
	Name    string // "embedding", "h.0", ..., "ln_f"
	Offset  int    // of its first element in the flat vector
	Size    int
	Tensors []Tensor
}

// Layout is the order of the flat fp32 parameter vector:
//
//	unit 0      embedding: wte (V,C), wpe (T,C)
//	unit 1..L   block l−1, prefix "h.{l−1}.":
//	            ln_1.weight (C), ln_1.bias (C),
//	            attn.c_attn.weight (3C,C), attn.c_attn.bias (3C),
//	            attn.c_proj.weight (C,C), attn.c_proj.bias (C),
//	            ln_2.weight (C), ln_2.bias (C),
//	            mlp.c_fc.weight (4C,C), mlp.c_fc.bias (4C),
//	            mlp.c_proj.weight (C,4C), mlp.c_proj.bias (C)
//	unit L+1    final LayerNorm: ln_f.weight (C), ln_f.bias (C)
//
// Names follow Hugging Face's GPT-2, but linear weights are stored
// (out, in) as in torch.nn.Linear (HF's Conv1D stores the transpose). The
// c_attn output is [q | k | v], each C wide with head h at columns
// [h·HS, (h+1)·HS).
type Layout struct {
	Units []Unit
	Size  int // total number of parameters
}

// Layout returns the parameter layout of c (which must be valid).
func (c Config) Layout() Layout {
	C, L := c.Hidden, c.Layers
	var lay Layout
	add := lay.add
	tn := func(name string, shape ...int) Tensor { return Tensor{Name: name, Shape: shape} }
	add("embedding", tn("wte", c.Vocab, C), tn("wpe", c.SeqLen, C))
	for l := 0; l < L; l++ {
		p := fmt.Sprintf("h.%d.", l)
		add(fmt.Sprintf("h.%d", l),
			tn(p+"ln_1.weight", C), tn(p+"ln_1.bias", C),
			tn(p+"attn.c_attn.weight", 3*C, C), tn(p+"attn.c_attn.bias", 3*C),
			tn(p+"attn.c_proj.weight", C, C), tn(p+"attn.c_proj.bias", C),
			tn(p+"ln_2.weight", C), tn(p+"ln_2.bias", C),
			tn(p+"mlp.c_fc.weight", 4*C, C), tn(p+"mlp.c_fc.bias", 4*C),
			tn(p+"mlp.c_proj.weight", C, 4*C), tn(p+"mlp.c_proj.bias", C))
	}
	add("ln_f", tn("ln_f.weight", C), tn("ln_f.bias", C))
	return lay
}

// add appends a unit of the given tensors, filling in sizes and offsets.
func (l *Layout) add(name string, tensors ...Tensor) {
	u := Unit{Name: name, Offset: l.Size}
	for _, t := range tensors {
		t.Size = 1
		for _, d := range t.Shape {
			t.Size *= d
		}
		t.Offset = l.Size
		l.Size += t.Size
		u.Tensors = append(u.Tensors, t)
	}
	u.Size = l.Size - u.Offset
	l.Units = append(l.Units, u)
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

// blockView is one block's parameters (or gradients) as slices of its
// unit; the shapes are a tensor-parallel rank's (C' = C/t, F = 4C/t; t = 1
// without tensor parallelism).
type blockView struct {
	ln1w, ln1b   []float32 // (C)
	qkvw, qkvb   []float32 // (3C',C), (3C')
	projw, projb []float32 // (C,C'), (C)
	ln2w, ln2b   []float32 // (C)
	fcw, fcb     []float32 // (F,C), (F)
	fc2w, fc2b   []float32 // (C,F), (C)
}

// viewBlock slices a block unit's buffer (length 12C²+13C) in Layout order.
func viewBlock(buf []float32, C int) blockView { return viewBlockPart(buf, C, 1) }

// viewBlockPart slices the block unit of a tensor-parallel rank of t in
// PartLayout order.
func viewBlockPart(buf []float32, C, t int) blockView {
	Cl, F := C/t, 4*C/t
	var v blockView
	next := func(n int) []float32 {
		s := buf[:n:n]
		buf = buf[n:]
		return s
	}
	v.ln1w, v.ln1b = next(C), next(C)
	v.qkvw, v.qkvb = next(3*Cl*C), next(3*Cl)
	v.projw, v.projb = next(C*Cl), next(C)
	v.ln2w, v.ln2b = next(C), next(C)
	v.fcw, v.fcb = next(F*C), next(F)
	v.fc2w, v.fc2b = next(C*F), next(C)
	return v
}
