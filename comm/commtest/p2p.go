package commtest

import (
	"errors"
	"fmt"
	"sync/atomic"
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
	ins := make([]comm.Buf, p)
	err := each(gs, func(r int, g comm.Group) error {
		ins[r] = newBuf(d, n)
		s := g.Send(outs[r], (r+1)%p, 7)
		rv := g.Recv(ins[r], (r+p-1)%p, 7)
		return errors.Join(rv.Wait(), s.Wait())
	})
	if err != nil {
		return fmt.Errorf("send/recv ring %v n=%d: %w", d, n, err)
	}
	for r := range ins {
		if err := exact(ins[r], 0, xs[(r+p-1)%p]); err != nil {
			return fmt.Errorf("send/recv ring %v n=%d (p=%d): rank %d: %w", d, n, p, r, err)
		}
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
	got := make([]comm.Buf, k+1)
	err := each(gs, func(r int, g comm.Group) error {
		switch r {
		case 0:
			var ws []comm.Work
			for i := 0; i < k; i++ {
				ws = append(ws, g.Send(msgs[i], 1, 1+i/3))
			}
			ws = append(ws, g.Send(msgs[k], p-1, 1))
			return waitAll(ws)
		case 1:
			got[3] = newBuf(d, msgs[3].Len())
			ws := []comm.Work{g.Recv(got[3], 0, 2)}
			for i := 0; i < 3; i++ {
				got[i] = newBuf(d, msgs[i].Len())
				ws = append(ws, g.Recv(got[i], 0, 1))
			}
			if p == 2 {
				got[k] = newBuf(d, msgs[k].Len())
				ws = append(ws, g.Recv(got[k], 0, 1))
			}
			return waitAll(ws)
		case p - 1:
			got[k] = newBuf(d, msgs[k].Len())
			return comm.Recv(g, got[k], 0, 1)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("send/recv tags %v: %w", d, err)
	}
	for i := range got {
		if err := exact(got[i], 0, xs[i]); err != nil {
			return fmt.Errorf("send/recv tags %v (p=%d): message %d: %w", d, p, i, err)
		}
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

// barrierCase: no rank leaves a barrier before every rank entered it.
func barrierCase(e *env) error {
	for _, p := range []int{1, 2, 5, 8} {
		w := e.world(p, normalTimeout)
		var entered [3]atomic.Int32
		err := each(w.Groups, func(r int, g comm.Group) error {
			for round := range entered {
				time.Sleep(time.Duration(r) * time.Millisecond)
				entered[round].Add(1)
				if err := comm.Barrier(g); err != nil {
					return err
				}
				if got := entered[round].Load(); got != int32(p) {
					return fmt.Errorf("left barrier %d when %d of %d ranks had entered", round, got, p)
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
