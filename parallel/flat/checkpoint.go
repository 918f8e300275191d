package flat

import (
	"fmt"

	"trellis/arch"
	"trellis/checkpoint"
	"trellis/optim"
)

// Tensor locates one named tensor in the flat parameter vector.
type Tensor struct {
	Name   string
	Offset int   // of its first element in the flat vector
	Size   int   // elements, the product of Shape
	Shape  []int // row-major
	// Global places a tensor-parallel rank's tensor in the global one
	// (zero: the tensor is whole), of shape GlobalShape. The box's
	// elements lead; the rest of the tensor is padding, never saved nor
	// counted in norms.
	Global      arch.Slice
	GlobalShape []int
	// Copy marks a replicated tensor another rank of the tensor-parallel
	// group saves and counts in the gradient norm (this rank holds an
	// identical copy).
	Copy bool
}

// Shards cuts the flat elements [lo, lo+len(buf)) into per-tensor
// checkpoint shards named prefix+tensor name, so that a checkpoint is
// indexed by tensor whatever the sharding that wrote it.
// valid is the number of leading elements that are weights.
func (t Tensor) valid() int {
	if t.Global.Whole() {
		return t.Size
	}
	return t.Global.Elems()
}

// A tensor-parallel rank's tensors are saved as N-d boxes of the global
// ones, without padding and without the replicated copies (Copy).
func Shards(ts []Tensor, prefix string, lo int, buf []float32) []checkpoint.Shard {
	hi := lo + len(buf)
	var out []checkpoint.Shard
	for _, t := range ts {
		a, b := max(lo, t.Offset), min(hi, t.Offset+t.valid())
		if a >= b || t.Copy {
			continue
		}
		v := buf[a-lo : b-lo]
		if t.Global.Whole() {
			out = append(out, checkpoint.Float32Shard(prefix+t.Name, t.Shape, int64(a-t.Offset), v))
			continue
		}
		sl := checkpoint.Slice{View: t.Global.View, Off: t.Global.Off, Ext: t.Global.Ext}
		out = append(out, checkpoint.SliceShard(prefix+t.Name, t.GlobalShape, sl, int64(a-t.Offset), v))
	}
	return out
}

// Read fills dst with the flat elements [lo, lo+len(dst)) of the tensors
// named prefix+name, from whichever ranks' files hold them: of each global
// tensor it asks the checkpoint only for the range of elements dst covers
// (c.ReadElems), so a checkpoint opened for partial reads reads only the
// shards that overlap this rank's part, whatever plan wrote them.
func Read(c *checkpoint.Checkpoint, ts []Tensor, prefix string, lo int, dst []float32) error {
	hi := lo + len(dst)
	for _, t := range ts {
		a, b := max(lo, t.Offset), min(hi, t.Offset+t.Size)
		if a >= b {
			continue
		}
		out := dst[a-lo : b-lo]
		clear(out) // padding
		want := t.Size
		if !t.Global.Whole() {
			want = numel(t.GlobalShape)
		}
		if e, ok := c.Index().Tensors[prefix+t.Name]; ok && numel(e.Shape) != want {
			return fmt.Errorf("flat: checkpoint tensor %s has %d elements, the model wants %d", prefix+t.Name, numel(e.Shape), want)
		}
		// The global elements [glo, ghi) that local [x0, x1) maps into.
		x0, x1 := a-t.Offset, b-t.Offset
		glo, ghi := -1, -1
		t.Global.Runs(t.valid(), func(local, global, n int) {
			if x, y := max(x0, local), min(x1, local+n); x < y {
				if g := global + x - local; glo < 0 || g < glo {
					glo = g
				}
				ghi = max(ghi, global+y-local)
			}
		})
		if glo < 0 {
			continue // only padding
		}
		sh, err := c.ReadElems(prefix+t.Name, int64(glo), int64(ghi))
		if err != nil {
			return err
		}
		v, err := sh.Float32()
		if err != nil {
			return err
		}
		t.Global.Runs(t.valid(), func(local, global, n int) {
			if x, y := max(x0, local), min(x1, local+n); x < y {
				copy(out[x-x0:], v[global+x-local-glo:global+y-local-glo])
			}
		})
	}
	return nil
}

// SumSquares is Σ g² over the elements [lo, lo+len(g)) of the flat vector
// that this rank counts in the global gradient norm: every weight once over
// the tensor-parallel group (no padding, no replicated Copy).
func SumSquares(ts []Tensor, lo int, g []float32) float64 {
	hi := lo + len(g)
	var s float64
	for _, t := range ts {
		a, b := max(lo, t.Offset), min(hi, t.Offset+t.valid())
		if a < b && !t.Copy {
			s += optim.SumSquares(g[a-lo : b-lo])
		}
	}
	return s
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// TensorsOf lists the tensors of a model layout, in flat-vector order.
func TensorsOf(l arch.Layout) []Tensor {
	var ts []Tensor
	for _, u := range l.Units {
		for _, t := range u.Tensors {
			ts = append(ts, Tensor{Name: t.Name, Offset: t.Offset, Size: t.Size, Shape: t.Shape})
		}
	}
	return ts
}

// TensorsOfPart lists the tensors part p of cfg holds (arch's
// PartLayout), in flat-vector order, with their places in the global
// tensors; ranks other than the group's first mark their replicated
// tensors Copy.
func TensorsOfPart(cfg arch.Config, p arch.Part) []Tensor {
	return TensorsOfLocal(cfg.PartLayout(p), cfg.Layout(), func(_ int, t arch.Tensor) bool { return t.Replicated && p.Rank != 0 })
}

// TensorsOfLocal lists the tensors of a rank's local layout (any part of
// the global model: a tensor-parallel slice, a pipeline stage's units),
// their global shapes taken from global; copies says which of them
// another rank saves and counts (marked Copy; nil: none).
func TensorsOfLocal(local, global arch.Layout, copies func(unit int, t arch.Tensor) bool) []Tensor {
	var ts []Tensor
	for _, u := range local.Units {
		for _, t := range u.Tensors {
			ts = append(ts, Tensor{Name: t.Name, Offset: t.Offset, Size: t.Size, Shape: t.Shape,
				Global: t.Global, GlobalShape: t.GlobalShape(global), Copy: copies != nil && copies(u.Index, t)})
		}
	}
	return ts
}
