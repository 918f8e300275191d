package zero

import (
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/parallel/flat"
)

// pending is a reduce-scatter in flight. When tmp is set, its result lands
// there and is added into the bucket's gradient chunk once complete; src
// (stages 2, 3) is the staging buffer it reads, freed once complete.
type pending struct {
	op  *flat.Op
	b   int
	tmp *device.Buffer
	src *device.Buffer
}

// Grads returns unit u's gradient buffer: a view of the full gradients
// (stage 1), or of its bucket's full gradient for this micro-batch
// (stages 2, 3), allocated zeroed at the bucket's first Grads.
func (s *Strategy) Grads(u int) ([]float32, error) {
	if err := s.bl.CheckUnit(u); err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	b := &s.bk[s.bl.Of(u)]
	pos, n := s.bl.InBucket(u)
	if s.cfg.Stage == 1 {
		return b.gfull[pos : pos+n], nil
	}
	if b.staging == nil {
		buf, err := s.cfg.Device.Alloc(device.Comm, b.Padded)
		if err != nil {
			return nil, fmt.Errorf("zero: gradients of units %d..%d: %w", b.First, b.Last, err)
		}
		b.staging = buf
	}
	return b.staging.Data[pos : pos+n], nil
}

// GradsDone marks unit u's gradient final for this micro-batch. When it
// completes its bucket, the bucket's reduction is issued (with overlap:
// stage 1 on the step's last micro-batch only, stages 2 and 3 on every
// one); without overlap, stages 2 and 3 reduce every bucket once the last
// one is complete.
func (s *Strategy) GradsDone(u int) error {
	if err := s.bl.CheckUnit(u); err != nil {
		return fmt.Errorf("zero: %w", err)
	}
	bi := s.bl.Of(u)
	b := &s.bk[bi]
	b.left--
	if b.left != 0 {
		return nil
	}
	switch {
	case s.cfg.Stage == 1:
		if s.cfg.Overlap && s.micro == s.accum-1 {
			return s.reduce(bi)
		}
		return nil
	case s.cfg.Overlap:
		return s.reduce(bi)
	}
	for i := range s.bk {
		if s.bk[i].left > 0 {
			return nil
		}
	}
	return s.reduceAll()
}

// reduceAll issues the reductions not yet issued, from the last bucket
// down, and waits for all of them.
func (s *Strategy) reduceAll() error {
	for bi := len(s.bk) - 1; bi >= 0; bi-- {
		if !s.bk[bi].issued && (s.cfg.Stage == 1 || s.bk[bi].staging != nil) {
			if err := s.reduce(bi); err != nil {
				s.reap()
				return err
			}
		}
	}
	return s.reap()
}

// reduce issues bucket bi's reduce-scatter (average over the ranks):
// stage 1 in place into the own chunk of the full gradients; stages 2 and
// 3 from the staging buffer into the gradient chunk on a step's first
// micro-batch and into a temporary chunk, added when reaped, on the
// others.
//
// A reduction is reaped (waited for, its temporary added, its staging
// buffer freed) on the rank's goroutine at fixed points of the schedule
// only: when the next bucket's reduction is issued (at most maxInflight
// are in flight) and when the step's gradients are finished. So the comm
// tag's peak does not depend on when the network delivers — with
// overlap, E + 2B (+ a chunk after a step's first micro-batch; see
// Shape.Memory) — while each reduction still overlaps the backward pass
// of the bucket below it.
func (s *Strategy) reduce(bi int) error {
	b := &s.bk[bi]
	b.issued = true
	if s.cfg.Stage == 1 {
		w := s.cfg.Grads.ReduceScatter(comm.F32(b.g), comm.F32(b.gfull), comm.Avg)
		s.inflight = append(s.inflight, pending{op: s.track.Watch(w, nil), b: bi})
		return nil
	}
	// At most maxInflight reductions hold a staging buffer at once: when
	// the links are slower than the backward pass, the oldest is waited for
	// rather than letting full gradients pile up.
	for len(s.inflight) >= maxInflight {
		if err := s.reapFront(); err != nil {
			return err
		}
	}
	src := b.staging
	b.staging = nil
	p := pending{b: bi, src: src}
	dst := b.g
	if s.micro > 0 {
		var err error
		if p.tmp, err = s.cfg.Device.Alloc(device.Comm, len(b.g)); err != nil {
			src.Free()
			return fmt.Errorf("zero: reducing the gradients of units %d..%d: %w", b.First, b.Last, err)
		}
		dst = p.tmp.Data
	}
	w := s.cfg.Grads.ReduceScatter(comm.F32(dst), comm.F32(src.Data), comm.Avg)
	p.op = s.track.Watch(w, nil)
	s.inflight = append(s.inflight, p)
	return nil
}

// maxInflight bounds the stage-2/3 reduce-scatters in flight.
const maxInflight = 1

// reapFront waits for the oldest reduction in flight and completes it.
func (s *Strategy) reapFront() error {
	p := s.inflight[0]
	s.inflight = s.inflight[1:]
	return s.complete(p)
}

// reap completes every reduction in flight, in issue order.
func (s *Strategy) reap() error {
	var first error
	for len(s.inflight) > 0 {
		if err := s.reapFront(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// complete waits for p, adds its temporary chunk into the bucket's
// gradient chunk and frees it and the staging buffer. Adds happen here, on the rank's own
// goroutine in issue order, so the sums do not depend on timing.
func (s *Strategy) complete(p pending) error {
	err := p.op.Wait()
	if p.tmp != nil {
		if err == nil {
			g := s.bk[p.b].g
			for i, v := range p.tmp.Data {
				g[i] += v
			}
		}
		p.tmp.Free()
	}
	p.src.Free()
	if err != nil {
		return fmt.Errorf("zero: gradient reduce-scatter of bucket %d: %w", p.b, err)
	}
	return nil
}

// FinishGrads issues whatever is not reduced yet (stage 1 without
// overlap) and waits for every reduction of the step.
func (s *Strategy) FinishGrads() error {
	return s.reduceAll()
}
