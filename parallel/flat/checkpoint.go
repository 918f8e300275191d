package flat

import (
	"fmt"

	"trellis/checkpoint"
	"trellis/model"
)

// Tensor locates one named tensor in the flat parameter vector.
type Tensor struct {
	Name   string
	Offset int   // of its first element in the flat vector
	Size   int   // elements, the product of Shape
	Shape  []int // row-major
}

// Shards cuts the flat elements [lo, lo+len(buf)) into per-tensor
// checkpoint shards named prefix+tensor name, so that a checkpoint is
// indexed by tensor whatever the sharding that wrote it.
func Shards(ts []Tensor, prefix string, lo int, buf []float32) []checkpoint.Shard {
	hi := lo + len(buf)
	var out []checkpoint.Shard
	for _, t := range ts {
		a, b := max(lo, t.Offset), min(hi, t.Offset+t.Size)
		if a >= b {
			continue
		}
		out = append(out, checkpoint.Float32Shard(prefix+t.Name, t.Shape, int64(a-t.Offset), buf[a-lo:b-lo]))
	}
	return out
}

// Read fills dst with the flat elements [lo, lo+len(dst)) of the tensors
// named prefix+name, from whichever ranks' files hold them.
func Read(c *checkpoint.Checkpoint, ts []Tensor, prefix string, lo int, dst []float32) error {
	hi := lo + len(dst)
	for _, t := range ts {
		a, b := max(lo, t.Offset), min(hi, t.Offset+t.Size)
		if a >= b {
			continue
		}
		sh, err := c.ReadTensor(prefix + t.Name)
		if err != nil {
			return err
		}
		v, err := sh.Float32()
		if err != nil {
			return err
		}
		if len(v) != t.Size {
			return fmt.Errorf("flat: checkpoint tensor %s has %d elements, the model wants %d", prefix+t.Name, len(v), t.Size)
		}
		copy(dst[a-lo:b-lo], v[a-t.Offset:b-t.Offset])
	}
	return nil
}

// TensorsOf lists the tensors of a model layout, in flat-vector order.
func TensorsOf(l model.Layout) []Tensor {
	var ts []Tensor
	for _, u := range l.Units {
		for _, t := range u.Tensors {
			ts = append(ts, Tensor{Name: t.Name, Offset: t.Offset, Size: t.Size, Shape: t.Shape})
		}
	}
	return ts
}
