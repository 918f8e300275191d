package commtest

import (
	"errors"
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// argsCase: every malformed call fails at issue time with ErrArgs, on each
// rank alone, and the group still works afterwards.
func argsCase(e *env) error {
	const p = 3
	w := e.world(p, normalTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		f := func(n int) comm.Buf { return comm.F32(make([]float32, n)) }
		h := func(n int) comm.Buf { return comm.BF16(make([]tensor.BF16Bits, n)) }
		shared := f(12)
		bad := []struct {
			name string
			do   func() comm.Work
		}{
			{"allreduce unknown op", func() comm.Work { return g.AllReduce(f(4), comm.ReduceOp(9)) }},
			{"reducescatter src not p×dst", func() comm.Work { return g.ReduceScatter(f(4), f(13), comm.Sum) }},
			{"reducescatter dtypes differ", func() comm.Work { return g.ReduceScatter(f(4), h(12), comm.Sum) }},
			{"reducescatter unknown op", func() comm.Work { return g.ReduceScatter(f(4), f(12), comm.ReduceOp(7)) }},
			{"reducescatter dst overlaps another chunk", func() comm.Work {
				return g.ReduceScatter(shared.Slice(((r+1)%p)*4, ((r+1)%p)*4+4), shared, comm.Sum)
			}},
			{"allgather dst not p×src", func() comm.Work { return g.AllGather(f(11), f(4)) }},
			{"allgather dtypes differ", func() comm.Work { return g.AllGather(h(12), f(4)) }},
			{"allgather src overlaps another chunk", func() comm.Work {
				return g.AllGather(shared, shared.Slice(((r+1)%p)*4, ((r+1)%p)*4+4))
			}},
			{"broadcast root -1", func() comm.Work { return g.Broadcast(f(4), -1) }},
			{"broadcast root p", func() comm.Work { return g.Broadcast(f(4), p) }},
			{"alltoall not divisible", func() comm.Work { return g.AllToAll(f(7), f(7)) }},
			{"alltoall lengths differ", func() comm.Work { return g.AllToAll(f(6), f(9)) }},
			{"alltoall dtypes differ", func() comm.Work { return g.AllToAll(h(6), f(6)) }},
			{"alltoall in place", func() comm.Work { return g.AllToAll(shared, shared) }},
			{"send peer -1", func() comm.Work { return g.Send(f(1), -1, 0) }},
			{"send peer p", func() comm.Work { return g.Send(f(1), p, 0) }},
			{"recv peer p", func() comm.Work { return g.Recv(f(1), p, 0) }},
		}
		for _, b := range bad {
			if err := waitBriefly(b.do()); !errors.Is(err, comm.ErrArgs) {
				return fmt.Errorf("%s: got %v, want ErrArgs", b.name, err)
			}
		}
		badGroups := [][]int{{}, {r, r}, {r, p}, {-1, r}, {(r + 1) % p}}
		for _, ranks := range badGroups {
			if sub, err := g.NewGroup("bad", ranks); !errors.Is(err, comm.ErrArgs) || sub != nil {
				return fmt.Errorf("NewGroup(%v) by rank %d: got %v, %v, want ErrArgs", ranks, r, sub, err)
			}
		}
		buf := []float32{float32(r)}
		if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
			return fmt.Errorf("after rejected calls: %w", err)
		}
		if want := float32(p * (p - 1) / 2); buf[0] != want {
			return fmt.Errorf("after rejected calls: sum %g, want %g", buf[0], want)
		}
		return nil
	})
}

// waitBriefly waits for w, but reports a Work still pending after a second:
// a rejected call must not wait for peers.
func waitBriefly(w comm.Work) error {
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Second):
		return errors.New("still pending after 1s: bad arguments must fail at issue time")
	}
}

// namesRank checks err is a *comm.PeerError naming world rank want.
func namesRank(err error, want int) error {
	var pe *comm.PeerError
	if !errors.Is(err, comm.ErrPeer) || !errors.As(err, &pe) {
		return fmt.Errorf("got %v, want a *comm.PeerError", err)
	}
	if pe.Rank != want {
		return fmt.Errorf("error names rank %d, want %d: %v", pe.Rank, want, err)
	}
	return nil
}

// silentPeer: rank 2 of 4 never joins an all-reduce. Every other rank gets a
// *comm.PeerError within the timeout; rank 2 is named by at least one of
// them, because of a timeout, and none names itself. Later ops fail fast.
func silentPeer(e *env) error {
	const p, silent = 4, 2
	w := e.world(p, failTimeout)
	named := make([]int, p)
	err := each(w.Groups, func(r int, g comm.Group) error {
		if r == silent {
			return nil
		}
		start := time.Now()
		err := comm.AllReduce(g, comm.F32(make([]float32, 100)), comm.Sum)
		if took := time.Since(start); took > failTimeout+slack {
			return fmt.Errorf("error after %v, want within %v + %v", took, failTimeout, slack)
		}
		var pe *comm.PeerError
		if !errors.Is(err, comm.ErrPeer) || !errors.As(err, &pe) {
			return fmt.Errorf("got %v, want a *comm.PeerError", err)
		}
		named[r] = pe.Rank
		if pe.Rank == r {
			return fmt.Errorf("error names this rank itself: %v", err)
		}
		if pe.Rank == silent && !errors.Is(err, comm.ErrTimeout) {
			return fmt.Errorf("error names rank %d but is not a timeout: %v", silent, err)
		}
		return failsFast(g)
	})
	if err != nil {
		return fmt.Errorf("silent peer: %w", err)
	}
	for r, n := range named {
		if r != silent && n == silent {
			return nil
		}
	}
	return fmt.Errorf("silent peer: no rank named the silent rank %d (named %v)", silent, named)
}

// failsFast checks that an op issued on a broken group fails at once.
func failsFast(g comm.Group) error {
	start := time.Now()
	if err := comm.Barrier(g); err == nil {
		return errors.New("an op after the failure succeeded")
	}
	if took := time.Since(start); took > failTimeout/2 {
		return fmt.Errorf("an op after the failure took %v to fail, want fast", took)
	}
	return nil
}

// silentSender: a Recv whose sender never sends fails naming the sender.
func silentSender(e *env) error {
	w := e.world(2, failTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		if r == 1 {
			return nil
		}
		start := time.Now()
		err := comm.Recv(g, comm.F32(make([]float32, 3)), 1, 9)
		if took := time.Since(start); took > failTimeout+slack {
			return fmt.Errorf("recv failed after %v, want within %v + %v", took, failTimeout, slack)
		}
		return namesRank(err, 1)
	})
}

// closePeer: rank 1 of 4 closes its world group while the others loop on
// all-reduce; each survivor's error names rank 1 within the timeout, and
// rank 1's own later ops fail with ErrClosed.
func closePeer(e *env) error {
	return stopPeer(e, "close", false, func(w World, r int) error {
		if err := w.Groups[r].Close(); err != nil {
			return fmt.Errorf("close: %w", err)
		}
		if err := comm.AllReduce(w.Groups[r], comm.F32(make([]float32, 10)), comm.Sum); !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("op after own Close: got %v, want ErrClosed", err)
		}
		return nil
	})
}

// killPeer: as closePeer, with the backend's Kill.
func killPeer(e *env) error {
	return stopPeer(e, "kill", true, func(w World, r int) error {
		w.Kill(r)
		return nil
	})
}

func stopPeer(e *env, how string, needKill bool, stop func(w World, r int) error) error {
	const p, victim, before = 4, 1, 3
	w := e.world(p, failTimeout)
	if needKill && w.Kill == nil {
		return errSkip
	}
	stopped := make(chan time.Time, 1)
	err := each(w.Groups, func(r int, g comm.Group) error {
		buf := make([]float32, 1000)
		for i := 0; ; i++ {
			if r == victim && i == before {
				t := time.Now()
				err := stop(w, r)
				stopped <- t
				return err
			}
			if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
				if r == victim || i < before {
					return fmt.Errorf("iteration %d: %w", i, err)
				}
				at := <-stopped
				stopped <- at
				if took := time.Since(at); took > failTimeout+slack {
					return fmt.Errorf("failed %v after the %s, want within %v + %v", took, how, failTimeout, slack)
				}
				if err := namesRank(err, victim); err != nil {
					return err
				}
				return failsFast(g)
			}
		}
	})
	if err != nil {
		return fmt.Errorf("%s peer: %w", how, err)
	}
	return nil
}
