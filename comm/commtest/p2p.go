package commtest

import (
	"errors"
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

func pointToPoint(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		salt := 100
		for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, n := range []int{0, 1, 1001, 1 << 18} {
				salt++
				if err := ring(w.Groups, d, n, salt); err != nil {
					return err
				}
			}
			salt++
			if err := tagsAndOrder(w.Groups, d, salt); err != nil {
				return err
			}
		}
		return nil
	}
}

// ring has every rank send to the next and receive from the previous,
// issuing the Send first: Send must not wait for the Recv.
func ring(gs []comm.Group, d tensor.DType, n, salt int) error {
	p := len(gs)
	outs, xs := make([]comm.Buf, p), make([][]float64, p)
	for r := range outs {
		outs[r], xs[r] = input(d, reals, r, n, salt)
	}
	err := each(gs, func(r int, g comm.Group) error {
		in := newBuf(d, n)
		s := g.Send(outs[r], (r+1)%p, 7)
		rv := g.Recv(in, (r+p-1)%p, 7)
		if err := errors.Join(rv.Wait(), s.Wait()); err != nil {
			return err
		}
		return exact(in, 0, xs[(r+p-1)%p])
	})
	if err != nil {
		return fmt.Errorf("send/recv ring %v n=%d (p=%d): %w", d, n, p, err)
	}
	return nil
}

// tagsAndOrder: rank 0 sends to rank 1 three messages with tag 1 and one
// with tag 2, then one with tag 1 to the last rank; rank 1 receives tag 2
// first, then the tag 1 messages, which must come in the order sent.
func tagsAndOrder(gs []comm.Group, d tensor.DType, salt int) error {
	p := len(gs)
	const k = 4 // messages 0..2 tag 1, message 3 tag 2
	msgs, xs := make([]comm.Buf, k+1), make([][]float64, k+1)
	for i := range msgs {
		msgs[i], xs[i] = input(d, reals, i, 33+i, salt)
	}
	// check compares the messages received: got[i] is message i.
	check := func(got map[int]comm.Buf) error {
		for i, b := range got {
			if err := exact(b, 0, xs[i]); err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
		}
		return nil
	}
	err := each(gs, func(r int, g comm.Group) error {
		got := map[int]comm.Buf{}
		recv := func(i, tag int) comm.Work {
			got[i] = newBuf(d, msgs[i].Len())
			return g.Recv(got[i], 0, tag)
		}
		switch r {
		case 0:
			var ws []comm.Work
			for i := 0; i < k; i++ {
				ws = append(ws, g.Send(msgs[i], 1, 1+i/3))
			}
			ws = append(ws, g.Send(msgs[k], p-1, 1))
			return waitAll(ws)
		case 1:
			ws := []comm.Work{recv(3, 2)}
			for i := 0; i < 3; i++ {
				ws = append(ws, recv(i, 1))
			}
			if p == 2 {
				ws = append(ws, recv(k, 1))
			}
			if err := waitAll(ws); err != nil {
				return err
			}
			return check(got)
		case p - 1:
			if err := recv(k, 1).Wait(); err != nil {
				return err
			}
			return check(got)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("send/recv tags %v (p=%d): %w", d, p, err)
	}
	return nil
}

// waitAll waits for every Work and joins their errors.
func waitAll(ws []comm.Work) error {
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Wait())
	}
	return errors.Join(errs...)
}

// recvMismatch: a Recv whose buffer does not match the message fails with
// ErrArgs.
func recvMismatch(e *env) error {
	w := e.world(2, normalTimeout)
	err := each(w.Groups, func(r int, g comm.Group) error {
		if r == 0 {
			comm.Send(g, comm.F32(make([]float32, 5)), 1, 0) // may fail too
			return nil
		}
		err := comm.Recv(g, comm.F32(make([]float32, 4)), 0, 0)
		if !errors.Is(err, comm.ErrArgs) {
			return fmt.Errorf("recv of 5 elements into 4: got %v, want ErrArgs", err)
		}
		return nil
	})
	return err
}

// barrierCase: no rank leaves a barrier before every rank entered it. Rank
// r enters r ms late; after each barrier the ranks all-gather the wall-clock
// times they entered at (as four 16-bit pieces each, exact in fp32), and
// each checks it left no earlier than the last entry. The wall clock is
// shared by ranks in one process or on one host (SPMD mode).
func barrierCase(e *env) error {
	for _, p := range []int{1, 2, 5, 8} {
		if !e.fits(p) {
			continue
		}
		w := e.world(p, normalTimeout)
		err := each(w.Groups, func(r int, g comm.Group) error {
			for round := range 3 {
				time.Sleep(time.Duration(r) * time.Millisecond)
				entered := time.Now().UnixNano()
				if err := comm.Barrier(g); err != nil {
					return err
				}
				left := time.Now().UnixNano()
				all := make([]float32, 4*p)
				if err := comm.AllGather(g, comm.F32(all), comm.F32(stamp(entered))); err != nil {
					return err
				}
				for q := range p {
					if t := unstamp(all[4*q : 4*q+4]); t > left {
						return fmt.Errorf("left barrier %d %v before rank %d entered it", round, time.Duration(t-left), q)
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("barrier p=%d: %w", p, err)
		}
	}
	return nil
}

// stamp splits a time in ns into four 16-bit pieces.
func stamp(ns int64) []float32 {
	u := uint64(ns)
	return []float32{float32(u >> 48), float32(u >> 32 & 0xffff), float32(u >> 16 & 0xffff), float32(u & 0xffff)}
}

// unstamp joins stamp's pieces.
func unstamp(f []float32) int64 {
	return int64(uint64(f[0])<<48 | uint64(f[1])<<32 | uint64(f[2])<<16 | uint64(f[3]))
}
