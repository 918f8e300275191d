package zero

import (
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/parallel/flat"
	"trellis/tensor"
)

// gathered is a stage-3 bucket's full parameters, all-gathered (tag comm).
type gathered struct {
	buf  *device.Buffer // (Padded)
	op   *flat.Op
	refs int // Weights calls not yet released
}

// unit16 is a stage-3 unit's Param-dtype rounding while it is fetched
// (tag param): stage 3's weights are gathered in fp32 (they are the
// masters' chunks) and each unit rounded as it is used.
type unit16 struct {
	buf  *device.Buffer
	refs int
}

// localUnit is unit u's local number, or an error.
func (s *Strategy) localUnit(u int) (int, error) {
	i, ok := s.local[u]
	if !ok {
		return 0, fmt.Errorf("zero: unit %d is not held by this rank (it holds %v)", u, s.cfg.Layout.Indices())
	}
	return i, nil
}

// Weights returns unit u's parameters in the policy's Param dtype: a view
// of the full weights once their last all-gather landed (stages 0-2), or
// of its bucket gathered from the shards (stage 3, rounded into a unit
// buffer under a mixed policy).
func (s *Strategy) Weights(u int) (tensor.Buf, error) {
	lu, err := s.localUnit(u)
	if err != nil {
		return tensor.Buf{}, err
	}
	bi := s.bl.Of(lu)
	b := &s.bk[bi]
	pos, n := s.bl.InBucket(lu)
	if s.cfg.Stage < 3 {
		if err := s.waitGather(b); err != nil {
			return tensor.Buf{}, err
		}
		if b.half != nil {
			return tensor.Halves(s.cfg.Precision.Param, b.half[pos:pos+n]), nil
		}
		return tensor.F32s(b.full[pos : pos+n]), nil
	}
	// Free what is neither needed now nor next before gathering, so that
	// at most two buckets are resident.
	s.next = s.pred.next(u)
	nb := -1
	if i, ok := s.local[s.next]; ok && s.next >= 0 {
		nb = s.bl.Of(i)
	}
	if err := s.evict(bi, nb); err != nil {
		return tensor.Buf{}, err
	}
	g, err := s.gather(bi)
	if err != nil {
		return tensor.Buf{}, err
	}
	if s.cfg.Prefetch && nb >= 0 && nb != bi {
		if _, err := s.gather(nb); err != nil {
			return tensor.Buf{}, err
		}
	}
	if err := g.op.Wait(); err != nil {
		return tensor.Buf{}, fmt.Errorf("zero: all-gather of bucket %d: %w", bi, err)
	}
	g.refs++
	w := g.buf.Data[pos : pos+n]
	if !s.mixed() {
		return tensor.F32s(w), nil
	}
	h, ok := s.units16[u]
	if !ok {
		buf, err := s.cfg.Device.AllocOf(device.Param, s.cfg.Precision.Param, n)
		if err != nil {
			g.refs--
			return tensor.Buf{}, fmt.Errorf("zero: %s weights of unit %d: %w", s.cfg.Precision.Param, u, err)
		}
		h = &unit16{buf: buf}
		s.units16[u] = h
	}
	h.refs++
	s.cfg.Kernels.Encode(h.buf.Buf(), w)
	return h.buf.Buf(), nil
}

// waitGather waits for the all-gather of b's updated parameters (stages 1, 2).
func (s *Strategy) waitGather(b *bucket) error {
	if b.ag == nil {
		return nil
	}
	err := b.ag.Wait()
	b.ag = nil
	if err != nil {
		return fmt.Errorf("zero: all-gather of updated parameters: %w", err)
	}
	return nil
}

// gather returns bucket bi's gathered parameters, issuing the all-gather
// when they are not resident.
func (s *Strategy) gather(bi int) (*gathered, error) {
	if g, ok := s.res[bi]; ok {
		return g, nil
	}
	b := &s.bk[bi]
	buf, err := s.cfg.Device.Alloc(device.Comm, b.Padded)
	if err != nil {
		return nil, fmt.Errorf("zero: gathering the parameters of units %v: %w", s.unitsOf(b), err)
	}
	w := s.cfg.Params.AllGather(comm.F32(buf.Data), comm.F32(b.p))
	g := &gathered{buf: buf, op: s.track.Watch(w, nil)}
	s.res[bi] = g
	s.gathers[bi]++
	return g, nil
}

// unitsOf is the global numbers of b's units.
func (s *Strategy) unitsOf(b *bucket) []int {
	var out []int
	for i := b.First; i <= b.Last; i++ {
		out = append(out, s.cfg.Layout.Units[i].Index)
	}
	return out
}

// evict frees the gathered buckets nobody holds, other than keep1 and keep2.
func (s *Strategy) evict(keep1, keep2 int) error {
	var first error
	for bi, g := range s.res {
		if g.refs > 0 || bi == keep1 || bi == keep2 {
			continue
		}
		if err := s.release(bi); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// release waits for bucket bi's gather and frees it.
func (s *Strategy) release(bi int) error {
	g := s.res[bi]
	err := g.op.Wait()
	g.buf.Free()
	delete(s.res, bi)
	if err != nil {
		return fmt.Errorf("zero: all-gather of bucket %d: %w", bi, err)
	}
	return nil
}

// ReleaseWeights ends a use of unit u's weights. Under stage 3 the bucket
// is freed unless the unit expected next lies in it too, and a unit's
// Param-dtype rounding with its last release.
func (s *Strategy) ReleaseWeights(u int) {
	lu, ok := s.local[u]
	if s.cfg.Stage < 3 || !ok {
		return
	}
	if h, ok := s.units16[u]; ok {
		if h.refs--; h.refs == 0 {
			h.buf.Free()
			delete(s.units16, u)
		}
	}
	bi := s.bl.Of(lu)
	g, ok := s.res[bi]
	if !ok || g.refs == 0 {
		return
	}
	g.refs--
	nb := -1
	if i, ok := s.local[s.next]; ok && s.next >= 0 {
		nb = s.bl.Of(i)
	}
	if g.refs == 0 && nb != bi {
		s.release(bi) // its gather has been waited for: no error
	}
}

// dropGathered frees every gathered bucket (before the shards change).
func (s *Strategy) dropGathered() error {
	var first error
	for bi := range s.res {
		if err := s.release(bi); err != nil && first == nil {
			first = err
		}
	}
	s.pred.reset()
	s.next = -1
	return first
}
