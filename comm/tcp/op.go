package tcp

import (
	"errors"
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// pieceBytes is the largest frame an operation sends. Long messages are cut
// into pieces so that a ring step can forward piece k while piece k+1 is
// still arriving. It is a protocol constant: both ends must cut alike.
const pieceBytes = 1 << 20

// op is one running operation: the reqs it issued and its deadline.
type op struct {
	g     *group
	name  string
	tag   uint64
	bf16  bool // the payload's dtype, stamped on every frame
	reqs  []*req
	timer *time.Timer
}

func (g *group) newOp(name string, coll bool, dt tensor.DType) *op {
	o := &op{g: g, name: name, bf16: dt == tensor.BF16, timer: time.NewTimer(g.w.cfg.OpTimeout)}
	if coll {
		g.seq++
		o.tag = collTag | (g.seq&seqMask)<<subBits
	}
	return o
}

func (o *op) size() int { return len(o.g.ranks) }
func (o *op) me() int   { return o.g.me }

// mod is the non-negative remainder.
func mod(a, p int) int { return ((a % p) + p) % p }

// send queues b as one frame to group rank peer, on sub-channel sub of the
// operation's tag (a ring step; 0 otherwise).
func (o *op) send(peer int, b []byte, last bool, sub uint64) *req {
	w := o.g.w
	wr := o.g.ranks[peer]
	r := newReq(wr)
	o.reqs = append(o.reqs, r)
	k := chanKey{o.g.id, o.tag | sub}
	if wr == w.rank {
		r.done <- w.self.deliver(k, b, last, o.bf16)
		return r
	}
	encodeHeader(r.hdr[:], header{typ: frameData, last: last, bf16: o.bf16, group: k.group, tag: k.tag, length: uint32(len(b))})
	r.payload = b
	w.peers[wr].out.push(r)
	return r
}

// recv posts a receive of one frame from group rank peer into dst, copied,
// or combined into dst by red, on sub-channel sub.
func (o *op) recv(peer int, dst []byte, red *reducer, last bool, sub uint64) *req {
	w := o.g.w
	wr := o.g.ranks[peer]
	r := newReq(wr)
	r.dst, r.red, r.last, r.bf16, r.key = dst, red, last, o.bf16, chanKey{o.g.id, o.tag | sub}
	o.reqs = append(o.reqs, r)
	box := w.self
	if wr != w.rank {
		box = w.peers[wr].box
	}
	o.g.mu.Lock()
	defer o.g.mu.Unlock()
	if o.g.closed {
		r.done <- comm.ErrClosed
		return r
	}
	box.post(r)
	return r
}

// pieces cuts b into frames of at most pieceBytes on element boundaries
// (es bytes each). An empty b is one empty frame.
func pieces(b []byte, es int) [][]byte {
	if len(b) == 0 {
		return [][]byte{b}
	}
	step := pieceBytes / es * es
	out := make([][]byte, 0, (len(b)+step-1)/step)
	for off := 0; off < len(b); off += step {
		out = append(out, b[off:min(off+step, len(b))])
	}
	return out
}

// sendMsg sends b as a message: its pieces, the last one flagged.
func (o *op) sendMsg(peer int, b []byte, es int, sub uint64) []*req {
	ps := pieces(b, es)
	rs := make([]*req, len(ps))
	for k, pc := range ps {
		rs[k] = o.send(peer, pc, k == len(ps)-1, sub)
	}
	return rs
}

// recvMsg posts the receives of a message into b, one per piece.
func (o *op) recvMsg(peer int, b []byte, es int, red *reducer, sub uint64) []*req {
	ps := pieces(b, es)
	rs := make([]*req, len(ps))
	for k, pc := range ps {
		rs[k] = o.recv(peer, pc, red, k == len(ps)-1, sub)
	}
	return rs
}

// wait waits for one req, up to the operation's deadline. Past it, the
// peer the req waits on is declared dead, which fails the world and so
// finishes every req.
func (o *op) wait(r *req) error {
	if r.waited {
		return r.err
	}
	select {
	case r.err = <-r.done:
	case <-o.timer.C:
		o.g.w.fail(&comm.PeerError{Rank: r.peer, Op: o.name,
			Err: fmt.Errorf("%w: waited %v for rank %d", comm.ErrTimeout, o.g.w.cfg.OpTimeout, r.peer)})
		r.err = <-r.done
	}
	r.waited = true
	return r.err
}

// waitEach waits for each req in order, stopping at the first error.
func (o *op) waitEach(rs []*req) error {
	for _, r := range rs {
		if err := o.wait(r); err != nil {
			return err
		}
	}
	return nil
}

// end finishes the operation. On success it waits for every req; on error
// it fails the world (unless the group was closed), which finishes every
// outstanding req, and waits for them, so no goroutine touches the caller's
// buffers once the operation has returned.
func (o *op) end(err error) error {
	defer o.timer.Stop()
	if err == nil {
		err = o.waitEach(o.reqs)
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, comm.ErrClosed) {
		o.g.w.fail(asPeerError(err, o.g.w.rank))
		o.g.w.awaitAborts()
	}
	for _, r := range o.reqs {
		if !r.waited {
			r.err, r.waited = <-r.done, true
		}
	}
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		return &comm.PeerError{Rank: pe.Rank, Op: o.name, Err: pe.Err}
	}
	return fmt.Errorf("tcp: %s: %w", o.name, err)
}

func asPeerError(err error, rank int) *comm.PeerError {
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		return pe
	}
	return &comm.PeerError{Rank: rank, Op: "op", Err: err}
}
