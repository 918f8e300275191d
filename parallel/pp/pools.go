package pp

import (
	"errors"
	"fmt"

	"trellis/device"
	"trellis/model"
)

// weightStash is (mb, chunk)'s weight stash, from the free list or new.
func (s *Stage) weightStash(key [2]int) (*model.WeightStash, error) {
	c := key[1]
	var ws *model.WeightStash
	if n := len(s.wfree[c]); n > 0 {
		ws, s.wfree[c] = s.wfree[c][n-1], s.wfree[c][:n-1]
	} else {
		b, _, _ := s.cfg.Layout.Chunk(c)
		var err error
		if ws, err = s.cfg.GPT.NewWeightStash(b[0], b[1]); err != nil {
			return nil, err
		}
	}
	s.wlive[key] = ws
	return ws, nil
}

// stash is (mb, chunk)'s stash: a free block stash (every one holds the
// rank's largest chunk) or a new one, laid out for the chunk, with a head
// stash attached on the last model stage.
func (s *Stage) stash(key [2]int) (*model.Stash, error) {
	if st, ok := s.live[key]; ok {
		return st, nil
	}
	g := s.cfg.GPT
	b, _, last := s.cfg.Layout.Chunk(key[1])
	var st *model.Stash
	if n := len(s.free); n > 0 {
		st, s.free = s.free[n-1], s.free[:n-1]
	} else {
		var err error
		if st, err = g.NewStageStash(s.blocks[0], s.blocks[1], false); err != nil {
			return nil, err
		}
	}
	if err := g.ReshapeStageStash(st, b[0], b[1], false); err != nil {
		s.free = append(s.free, st)
		return nil, err
	}
	if last {
		var h *model.HeadStash
		if n := len(s.hfree); n > 0 {
			h, s.hfree = s.hfree[n-1], s.hfree[:n-1]
		} else {
			var err error
			if h, err = g.NewHeadStash(); err != nil {
				s.free = append(s.free, st)
				return nil, err
			}
		}
		if err := g.AttachHead(st, h); err != nil {
			s.free, s.hfree = append(s.free, st), append(s.hfree, h)
			return nil, err
		}
		s.hlive[key] = h
	}
	s.live[key] = st
	return st, nil
}

// releaseHead returns (mb, chunk)'s head stash, if it holds one: the
// head's activations are spent once its backward has run.
func (s *Stage) releaseHead(key [2]int, st *model.Stash) {
	if h, ok := s.hlive[key]; ok {
		s.cfg.GPT.DetachHead(st)
		s.hfree = append(s.hfree, h)
		delete(s.hlive, key)
	}
}

// buffer is a (B,T,C) boundary buffer (tag comm), reusing one whose send
// has completed.
func (s *Stage) buffer() (*device.Buffer, error) {
	s.reap()
	if n := len(s.bufs); n > 0 {
		b := s.bufs[n-1]
		s.bufs = s.bufs[:n-1]
		return b, nil
	}
	b, err := s.cfg.Device.Alloc(device.Comm, s.n)
	if err != nil {
		return nil, fmt.Errorf("pp: boundary buffer: %w", err)
	}
	return b, nil
}

// reap returns the buffers of completed gradient sends to the free list.
func (s *Stage) reap() {
	k := 0
	for _, p := range s.gsends {
		if p.w.done() {
			s.bufs = append(s.bufs, p.buf)
			continue
		}
		s.gsends[k] = p
		k++
	}
	s.gsends = s.gsends[:k]
}

// drain waits for the step's sends; every receive has been consumed.
func (s *Stage) drain() error {
	var first error
	for k, p := range s.sends {
		if err := p.w.Wait(); err != nil && first == nil {
			first = err
		}
		delete(s.sends, k)
	}
	for _, p := range s.gsends {
		if err := p.w.Wait(); err != nil && first == nil {
			first = err
		}
		s.bufs = append(s.bufs, p.buf)
	}
	s.gsends = s.gsends[:0]
	for k, b := range s.local {
		s.bufs = append(s.bufs, b)
		delete(s.local, k)
	}
	if len(s.recvs) != 0 || len(s.live) != 0 || len(s.wlive) != 0 {
		return errors.Join(first, fmt.Errorf("pp: rank %d ended the step with %d receives and %d stashes in flight", s.cfg.Layout.Rank, len(s.recvs), len(s.live)))
	}
	return first
}

// abort waits for what is in flight after a failure (errors ignored: the
// groups are broken and fail fast) and returns the stashes.
func (s *Stage) abort() {
	for k, p := range s.recvs {
		p.w.Wait()
		if p.buf != nil {
			s.bufs = append(s.bufs, p.buf)
		}
		delete(s.recvs, k)
	}
	s.drain()
	for k, st := range s.live {
		s.releaseHead(k, st)
		s.free = append(s.free, st)
		delete(s.live, k)
	}
	for k, ws := range s.wlive {
		s.wfree[k[1]] = append(s.wfree[k[1]], ws)
		delete(s.wlive, k)
	}
}

// Free returns the stashes and buffers.
func (s *Stage) Free() {
	s.abort()
	for _, st := range s.free {
		st.Free()
	}
	s.free = nil
	for _, h := range s.hfree {
		h.Free()
	}
	s.hfree = nil
	for _, fl := range s.wfree {
		for _, ws := range fl {
			ws.Free()
		}
	}
	s.wfree = nil
	for _, b := range s.bufs {
		b.Free()
	}
	s.bufs = nil
	s.cfg.Device.Release(device.Comm, s.held)
	s.held = 0
}

// chargeBuffered follows the link's Buffered gauge — messages that arrived
// before their receive was posted, held by the transport — on the device's
// comm tag, sampled after every action: the budget refuses a pipeline whose
// early messages do not fit, naming the bytes.
func (s *Stage) chargeBuffered() error {
	if s.cfg.Link == nil {
		return nil
	}
	b := s.cfg.Link.Stats().Buffered
	switch {
	case b > s.held:
		if err := s.cfg.Device.Reserve(device.Comm, b-s.held); err != nil {
			return fmt.Errorf("pp: %d bytes of messages received before their receives were posted: %w", b, err)
		}
	case b < s.held:
		s.cfg.Device.Release(device.Comm, s.held-b)
	}
	s.held = b
	return nil
}
