package commtest

import (
	"errors"
	"fmt"

	"trellis/comm"
	"trellis/tensor"
)

// Point-to-point without deadlock: Send and Recv do not occupy the group's
// queue, so no issue order of sends and receives deadlocks (comm's package
// documentation). These cases would hang (until the backend's timeout) on a
// backend that ran them one at a time on the queue.

// msg is one message of a pattern: its payload and the values it carries.
type msg struct {
	buf comm.Buf
	xs  []float64
}

// message makes the payload from rank `from` with tag; n elements (multi-
// piece for large n).
func message(d tensor.DType, from, tag, n int) msg {
	b, xs := input(d, reals, from, n, 1000+tag)
	return msg{b, xs}
}

// recvFirst: every rank posts its receives from both neighbours before its
// sends to them (the pipeline pattern), on fp32 and bf16, empty, small and
// multi-piece messages.
func recvFirst(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, n := range []int{0, 7, e.large + 5} { // large: several pieces on tcp
				msgs := make([][2]msg, p) // rank r's messages with tags 1 and 2
				for r := range msgs {
					msgs[r] = [2]msg{message(d, r, 1, n), message(d, r, 2, n)}
				}
				err := each(w.Groups, func(r int, g comm.Group) error {
					next, prev := (r+1)%p, (r+p-1)%p
					fromPrev, fromNext := newBuf(d, n), newBuf(d, n)
					ws := []comm.Work{g.Recv(fromPrev, prev, 1), g.Recv(fromNext, next, 2)}
					ws = append(ws, g.Send(msgs[r][0].buf, next, 1), g.Send(msgs[r][1].buf, prev, 2))
					if err := waitAll(ws); err != nil {
						return err
					}
					if err := exact(fromPrev, 0, msgs[prev][0].xs); err != nil {
						return fmt.Errorf("from rank %d: %w", prev, err)
					}
					return exact(fromNext, 0, msgs[next][1].xs)
				})
				if err != nil {
					return fmt.Errorf("recv-first ring %v n=%d (p=%d): %w", d, n, p, err)
				}
			}
		}
		return nil
	}
}

// crossOrder: rank 0 posts a receive, runs an all-reduce, waits for the
// receive and then sends, while rank 1 runs the all-reduce, sends and then
// receives; then the roles swap. The all-reduce can only complete if the
// posted Recv does not hold the queue.
func crossOrder(e *env) error {
	w := e.world(2, normalTimeout)
	n := e.large/4 + 3 // several pieces on tcp, unless the run is short
	for round := range 2 {
		waiter := round // the rank that receives before it sends
		msgs := []msg{message(tensor.F32, 0, 3+round, n), message(tensor.F32, 1, 3+round, n)}
		err := each(w.Groups, func(r int, g comm.Group) error {
			peer := 1 - r
			in := newBuf(tensor.F32, n)
			want := msgs[peer]
			if r == waiter {
				rv := g.Recv(in, peer, 3+round)
				sum := []float32{float32(r + 1)}
				if err := comm.AllReduce(g, comm.F32(sum), comm.Sum); err != nil || sum[0] != 3 {
					return fmt.Errorf("all-reduce with a Recv posted: %v, sum %g", err, sum[0])
				}
				if err := rv.Wait(); err != nil {
					return err
				}
				if err := comm.Send(g, msgs[r].buf, peer, 3+round); err != nil {
					return err
				}
			} else {
				sum := []float32{float32(r + 1)}
				if err := comm.AllReduce(g, comm.F32(sum), comm.Sum); err != nil || sum[0] != 3 {
					return fmt.Errorf("all-reduce: %v, sum %g", err, sum[0])
				}
				s := g.Send(msgs[r].buf, peer, 3+round)
				if err := errors.Join(comm.Recv(g, in, peer, 3+round), s.Wait()); err != nil {
					return err
				}
			}
			return exact(in, 0, want.xs)
		})
		if err != nil {
			return fmt.Errorf("cross order, rank %d receives first: %w", waiter, err)
		}
	}
	return nil
}

// manyInFlight: every rank posts k receives from every other rank, on k
// tags, with two messages per tag (FIFO within a tag), then sends them in
// the reverse tag order, all through one BatchP2P each; and a SendRecv
// shift. Message sizes differ by tag, so a mismatch in matching shows.
func manyInFlight(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		const k = 6
		size := func(tag, i int) int { return 1 + tag*97 + i*13 }
		err := each(w.Groups, func(r int, g comm.Group) error {
			var ops []comm.P2POp
			type slot struct {
				buf            comm.Buf
				from, tag, idx int
			}
			var got []slot
			for q := range p {
				if q == r {
					continue
				}
				for tag := range k {
					for i := range 2 {
						b := newBuf(tensor.BF16, size(tag, i))
						got = append(got, slot{b, q, tag, i})
						ops = append(ops, comm.RecvOp(b, q, tag))
					}
				}
			}
			for q := range p {
				for tag := k - 1; tag >= 0 && q != r; tag-- {
					for i := range 2 {
						ops = append(ops, comm.SendOp(message(tensor.BF16, r, tag*2+i, size(tag, i)).buf, q, tag))
					}
				}
			}
			if err := comm.BatchP2P(g, ops).Wait(); err != nil {
				return err
			}
			for _, s := range got {
				if err := exact(s.buf, 0, message(tensor.BF16, s.from, s.tag*2+s.idx, size(s.tag, s.idx)).xs); err != nil {
					return fmt.Errorf("message %d of tag %d from rank %d: %w", s.idx, s.tag, s.from, err)
				}
			}
			in := newBuf(tensor.F32, 5)
			if err := comm.SendRecv(g, message(tensor.F32, r, 99, 5).buf, (r+1)%p, in, (r+p-1)%p, 99); err != nil {
				return fmt.Errorf("SendRecv: %w", err)
			}
			return exact(in, 0, message(tensor.F32, (r+p-1)%p, 99, 5).xs)
		})
		if err != nil {
			return fmt.Errorf("many in flight (p=%d): %w", p, err)
		}
		return nil
	}
}

// buffered: messages that arrive before their Recv count in the receiver's
// Stats.Buffered until received.
func buffered(e *env) error {
	w := e.world(2, normalTimeout)
	const n1, n2 = 1000, 10 // fp32 and bf16 elements: 4020 bytes
	return each(w.Groups, func(r int, g comm.Group) error {
		if r == 0 {
			ws := []comm.Work{g.Send(comm.F32(make([]float32, n1)), 1, 3), g.Send(comm.BF16(make([]tensor.BF16Bits, n2)), 1, 3)}
			return errors.Join(comm.Barrier(g), waitAll(ws), comm.Barrier(g))
		}
		if err := comm.Barrier(g); err != nil { // rank 0's sends came before its barrier frames
			return err
		}
		if got := g.Stats().Buffered; got != 4*n1+2*n2 {
			return fmt.Errorf("Stats.Buffered = %d with two messages waiting, want %d", got, 4*n1+2*n2)
		}
		err := errors.Join(comm.Recv(g, comm.F32(make([]float32, n1)), 0, 3),
			comm.Recv(g, comm.BF16(make([]tensor.BF16Bits, n2)), 0, 3), comm.Barrier(g))
		if got := g.Stats().Buffered; err == nil && got != 0 {
			return fmt.Errorf("Stats.Buffered = %d after receiving everything, want 0", got)
		}
		return err
	})
}

// bufferBound: a sender that runs ahead of a receiver by more than the
// backend's MaxBuffered fails with comm.ErrBufferFull instead of growing
// the receiver's memory: the receiver's next operation reports it.
func bufferBound(e *env) error {
	const limit = 64 << 10
	w := e.worldOpts(2, Options{Timeout: failTimeout, MaxBuffered: limit})
	return each(w.Groups, func(r int, g comm.Group) error {
		if r == 0 {
			for range 3 {
				g.Send(comm.F32(make([]float32, limit/8)), 1, 4).Wait() // the third may fail
			}
			comm.Barrier(g) // fails once rank 1 gives up
			return nil
		}
		err := comm.Barrier(g)
		if !errors.Is(err, comm.ErrBufferFull) {
			return fmt.Errorf("3 × %d bytes sent with MaxBuffered=%d and no Recv: got %v, want ErrBufferFull", limit/2, limit, err)
		}
		return nil
	})
}
