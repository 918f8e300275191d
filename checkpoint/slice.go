package checkpoint

import (
	"errors"
	"fmt"
)

// Slice is an N-d box of a global tensor, for layouts that are not a
// contiguous range of its flattening (tensor parallelism's row-parallel
// weights, per-head QKV rows): the global tensor viewed with shape View
// (the same number of elements as its Shape), and the box of extent Ext
// at offset Off in that view. A shard with a Slice holds the elements
// [Lo, Hi) of the box's row-major flattening.
type Slice struct {
	View []int `json:"view"`
	Off  []int `json:"off"`
	Ext  []int `json:"ext"`
}

// SliceShard makes an F32 shard of v holding elements [lo, lo+len(v)) of
// the box sl of a tensor of global shape shape.
func SliceShard(name string, shape []int, sl Slice, lo int64, v []float32) Shard {
	s := Float32Shard(name, shape, lo, v)
	s.Slice = &Slice{View: append([]int{}, sl.View...), Off: append([]int{}, sl.Off...), Ext: append([]int{}, sl.Ext...)}
	return s
}

// validate checks the box against a tensor of n elements and returns the
// box's element count.
func (sl *Slice) validate(n int64) (int64, error) {
	d := len(sl.View)
	if d == 0 || len(sl.Off) != d || len(sl.Ext) != d {
		return 0, fmt.Errorf("slice view %v, off %v, ext %v: want one offset and extent per view dim", sl.View, sl.Off, sl.Ext)
	}
	vn, err := numel(sl.View)
	if err != nil {
		return 0, err
	}
	if vn != n {
		return 0, fmt.Errorf("slice view %v has %d elements, the tensor %d", sl.View, vn, n)
	}
	for i := range d {
		if sl.Off[i] < 0 || sl.Ext[i] < 0 || sl.Off[i]+sl.Ext[i] > sl.View[i] {
			return 0, fmt.Errorf("slice dim %d: [%d, %d+%d) is not inside [0, %d)", i, sl.Off[i], sl.Off[i], sl.Ext[i], sl.View[i])
		}
	}
	return numel(sl.Ext)
}

// runs calls fn for each run of box elements [lo, hi) that is contiguous in
// the global tensor: the element's index in the box, in the tensor, and
// the run's length. The box must be valid.
func (sl *Slice) runs(lo, hi int64, fn func(box, global, n int64)) {
	d := len(sl.View)
	stride := make([]int64, d)
	st := int64(1)
	for i := d - 1; i >= 0; i-- {
		stride[i] = st
		st *= int64(sl.View[i])
	}
	inner := int64(sl.Ext[d-1])
	if inner == 0 {
		return
	}
	for row := lo / inner; row*inner < hi; row++ {
		g, r := int64(0), row
		for i := d - 2; i >= 0; i-- { // the row's coordinates in the box's leading dims
			x := r % int64(sl.Ext[i])
			r /= int64(sl.Ext[i])
			g += (int64(sl.Off[i]) + x) * stride[i]
		}
		g += int64(sl.Off[d-1]) * stride[d-1]
		a, b := max(lo, row*inner), min(hi, (row+1)*inner)
		fn(a, g+a-row*inner, b-a)
	}
}

// coverage checks that shards, some of them boxes, cover each of the n
// elements of a tensor exactly once.
func coverage(shards []ShardEntry, n int64) error {
	seen := make([]uint64, (n+63)/64)
	var count int64
	var dup error
	mark := func(g, k int64) {
		for i := g; i < g+k; i++ {
			if seen[i/64]&(1<<(i%64)) != 0 && dup == nil {
				dup = fmt.Errorf("element %d is held twice", i)
			}
			seen[i/64] |= 1 << (i % 64)
		}
		count += k
	}
	for _, s := range shards {
		if s.Slice == nil {
			mark(s.Lo, s.Hi-s.Lo)
			continue
		}
		s.Slice.runs(s.Lo, s.Hi, func(_, g, k int64) { mark(g, k) })
	}
	if dup != nil {
		return dup
	}
	if count != n {
		return errors.New("some elements are held by no rank")
	}
	return nil
}
