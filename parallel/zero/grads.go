package zero

import (
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/parallel/flat"
)

// pending is a stage-2/3 reduce-scatter in flight. When tmp is set, its
// result lands there and is added into the bucket's gradient chunk once
// complete; src is the staging buffer it reads, freed once complete.
type pending struct {
	op  *flat.Op
	b   int
	tmp *device.Buffer
	src *device.Buffer
}

// BeginStep zeroes the gradients this rank accumulates into, for a step of
// accum micro-batches.
func (s *Strategy) BeginStep(accum int) error {
	if accum < 1 {
		return fmt.Errorf("zero: a step of %d micro-batches", accum)
	}
	s.accum = accum
	clear(s.g.Data)
	for i := range s.bk {
		b := &s.bk[i]
		b.left, b.done, b.reduced = b.Last-b.First+1, 0, 0
	}
	s.pred.beginStep()
	return nil
}

// Grads returns unit u's gradient buffer: a view of the full gradients
// (stages 0, 1), or of its bucket's full gradient for the current
// backward (stages 2, 3), allocated zeroed at the bucket's first Grads.
func (s *Strategy) Grads(u int) ([]float32, error) {
	lu, err := s.localUnit(u)
	if err != nil {
		return nil, err
	}
	b := &s.bk[s.bl.Of(lu)]
	pos, n := s.bl.InBucket(lu)
	if s.cfg.Stage < 2 {
		return b.gfull[pos : pos+n], nil
	}
	if b.staging == nil {
		buf, err := s.cfg.Device.Alloc(device.Comm, b.Padded)
		if err != nil {
			return nil, fmt.Errorf("zero: gradients of units %v: %w", s.unitsOf(b), err)
		}
		b.staging = buf
	}
	return b.staging.Data[pos : pos+n], nil
}

// GradsDone marks unit u's gradient final for the current backward pass.
// When it completes its bucket, the bucket's reduction is issued with
// Overlap: stages 0 and 1 on the step's last backward, stages 2 and 3 on
// every one (a tied bucket's in FinishGrads, after the tied sum); without
// Overlap, stages 2 and 3 reduce every bucket once all are complete.
func (s *Strategy) GradsDone(u int) error {
	lu, err := s.localUnit(u)
	if err != nil {
		return err
	}
	bi := s.bl.Of(lu)
	b := &s.bk[bi]
	if b.left--; b.left != 0 {
		return nil
	}
	b.left = b.Last - b.First + 1
	b.done++
	switch {
	case s.cfg.Stage < 2:
		if s.cfg.Overlap && b.done == s.accum && !b.tied && s.reduces() {
			s.reduceFull(bi)
		}
		return nil
	case s.cfg.Overlap:
		return s.reduce(bi)
	}
	for i := range s.bk {
		if s.bk[i].done <= s.bk[i].reduced {
			return nil
		}
	}
	return s.reduceAll()
}

// reduces says whether the stage's gradients are reduced over the group:
// always when sharded (a group of one reduce-scatters to itself), for
// stage 0 only over more than one rank.
func (s *Strategy) reduces() bool { return s.cfg.Stage > 0 || s.n > 1 }

// reduceFull issues bucket bi's stage-0 all-reduce or stage-1
// reduce-scatter (averages) over its full gradients, in place.
func (s *Strategy) reduceFull(bi int) {
	b := &s.bk[bi]
	b.reduced++
	var w comm.Work
	if s.cfg.Stage == 0 {
		w = s.cfg.Grads.AllReduce(comm.F32(b.gfull[:b.Len]), comm.Avg)
	} else {
		w = s.cfg.Grads.ReduceScatter(comm.F32(b.g), comm.F32(b.gfull), comm.Avg)
	}
	s.ops[bi] = s.track.Watch(w, nil)
}

// reduceAll issues the stage-2/3 reductions of the buckets holding
// gradients not yet reduced, from the last bucket down, and waits for all
// of them.
func (s *Strategy) reduceAll() error {
	for bi := len(s.bk) - 1; bi >= 0; bi-- {
		if s.bk[bi].staging != nil {
			if err := s.reduce(bi); err != nil {
				s.reap()
				return err
			}
		}
	}
	return s.reap()
}

// reduce issues bucket bi's stage-2/3 reduce-scatter (average over the
// group) from the staging buffer: into the gradient chunk for the
// bucket's first reduction of the step, into a temporary chunk, added
// when reaped, for the others.
//
// A reduction is reaped (waited for, its temporary added, its staging
// buffer freed) on the rank's goroutine at fixed points of the schedule
// only: when the next bucket's reduction is issued (at most maxInflight
// are in flight) and when the step's gradients are finished. So the comm
// tag's peak does not depend on when the network delivers — with
// overlap, E + 2B (+ a chunk after a bucket's first reduction; see
// Shape.Memory) — while each reduction still overlaps the backward pass of
// the bucket below it.
func (s *Strategy) reduce(bi int) error {
	b := &s.bk[bi]
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
	if b.reduced > 0 {
		var err error
		if p.tmp, err = s.cfg.Device.Alloc(device.Comm, len(b.g)); err != nil {
			src.Free()
			return fmt.Errorf("zero: reducing the gradients of units %v: %w", s.unitsOf(b), err)
		}
		dst = p.tmp.Data
	}
	b.reduced++
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
// gradient chunk and frees it and the staging buffer. Adds happen here,
// on the rank's own goroutine in issue order, so the sums do not depend
// on timing.
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

// FinishGrads completes the step's gradients: stages 0 and 1 sum the tied
// units over Config.Tied and issue the reductions not issued yet (from
// the last bucket down) and wait for all; stages 2 and 3 reduce what is
// still staged, wait, and sum the tied units' shards.
func (s *Strategy) FinishGrads() error {
	if s.cfg.Stage >= 2 {
		if err := s.reduceAll(); err != nil {
			return err
		}
		return s.sumTied()
	}
	if err := s.sumTied(); err != nil {
		return err
	}
	for bi := len(s.bk) - 1; bi >= 0; bi-- {
		if s.ops[bi] == nil && s.reduces() {
			s.reduceFull(bi)
		}
	}
	var first error
	for bi, op := range s.ops {
		if op == nil {
			continue
		}
		if err := op.Wait(); err != nil && first == nil {
			first = fmt.Errorf("zero: gradient reduction of bucket %d: %w", bi, err)
		}
		s.ops[bi] = nil
	}
	return first
}

// sumTied sums the tied units' gradients over Config.Tied: each unit's
// full gradient (stages 0, 1), or the own chunk of its bucket (stages 2,
// 3: a bucket of its own, laid out alike on every holder).
func (s *Strategy) sumTied() error {
	if s.cfg.Tied == nil {
		return nil
	}
	for _, u := range s.cfg.TiedUnits {
		lu, ok := s.local[u]
		if !ok {
			continue
		}
		b := &s.bk[s.bl.Of(lu)]
		x := b.g
		if s.cfg.Stage < 2 {
			pos, n := s.bl.InBucket(lu)
			x = b.gfull[pos : pos+n]
		}
		op := s.stages.Watch(s.cfg.Tied.AllReduce(comm.F32(x), comm.Sum), nil)
		if err := op.Wait(); err != nil {
			return fmt.Errorf("zero: tied gradient of unit %d: %w", u, err)
		}
	}
	return nil
}
