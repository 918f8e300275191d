package zero

import (
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/parallel/flat"
)

// gathered is a stage-3 bucket's full parameters, all-gathered (tag comm).
type gathered struct {
	buf  *device.Buffer // (Padded)
	op   *flat.Op
	refs int // Weights calls not yet released
}

// Weights returns unit u's parameters: a view of the full parameters once
// their last all-gather landed (stages 1, 2; with Half, the 16-bit ones
// widened, see half.go), or of its bucket gathered from the shards
// (stage 3).
func (s *Strategy) Weights(u int) ([]float32, error) {
	if err := s.bl.CheckUnit(u); err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	bi := s.bl.Of(u)
	b := &s.bk[bi]
	pos, n := s.bl.InBucket(u)
	if s.cfg.Stage < 3 {
		if err := s.waitGather(b); err != nil {
			return nil, err
		}
		if s.half() {
			return s.halfWeights(u, b, pos, n)
		}
		return b.full[pos : pos+n], nil
	}
	// Free what is neither needed now nor next before gathering, so that
	// at most two buckets are resident.
	s.next = s.pred.next(u)
	nb := -1
	if s.next >= 0 {
		nb = s.bl.Of(s.next)
	}
	if err := s.evict(bi, nb); err != nil {
		return nil, err
	}
	g, err := s.gather(bi)
	if err != nil {
		return nil, err
	}
	if s.cfg.Prefetch && nb >= 0 && nb != bi {
		if _, err := s.gather(nb); err != nil {
			return nil, err
		}
	}
	if err := g.op.Wait(); err != nil {
		return nil, fmt.Errorf("zero: all-gather of bucket %d: %w", bi, err)
	}
	g.refs++
	return g.buf.Data[pos : pos+n], nil
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
		return nil, fmt.Errorf("zero: gathering the parameters of units %d..%d: %w", b.First, b.Last, err)
	}
	w := s.cfg.Params.AllGather(comm.F32(buf.Data), comm.F32(b.p))
	g := &gathered{buf: buf, op: s.track.Watch(w, nil)}
	s.res[bi] = g
	s.gathers[bi]++
	return g, nil
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
// is freed unless the unit expected next lies in it too; with Half the
// unit's widened weights are freed with the last release.
func (s *Strategy) ReleaseWeights(u int) {
	if s.half() {
		s.releaseHalf(u)
		return
	}
	if s.cfg.Stage < 3 || s.bl.CheckUnit(u) != nil {
		return
	}
	bi := s.bl.Of(u)
	g, ok := s.res[bi]
	if !ok || g.refs == 0 {
		return
	}
	g.refs--
	if g.refs == 0 && (s.next < 0 || s.bl.Of(s.next) != bi) {
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
