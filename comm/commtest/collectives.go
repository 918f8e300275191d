package commtest

import (
	"fmt"

	"trellis/comm"
	"trellis/tensor"
)

// kase is one collective test: an op on a dtype with inputs of some kind.
type kase struct {
	d     tensor.DType
	v     vals
	redop comm.ReduceOp
	n     int // elements per rank (AllReduce, Broadcast) or per chunk
	root  int
	salt  int
}

func (c kase) String() string {
	return fmt.Sprintf("%v %v %v n=%d root=%d", c.d, c.v, c.redop, c.n, c.root)
}

// inputs returns every rank's input of m elements.
func (c kase) inputs(p, m int) ([]comm.Buf, [][]float64) {
	bufs := make([]comm.Buf, p)
	xs := make([][]float64, p)
	for r := range bufs {
		bufs[r], xs[r] = input(c.d, c.v, r, m, c.salt)
	}
	return bufs, xs
}

func collectives(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		sizes := []int{0, 1, 7, 2*p + 1, 5003}
		chunks := []int{0, 1, 7, 1001}
		salt := 0
		for _, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, v := range []vals{ints, reals} {
				for _, op := range []comm.ReduceOp{comm.Sum, comm.Avg, comm.Max} {
					for _, n := range sizes {
						salt++
						if err := allReduce(w.Groups, kase{d: d, v: v, redop: op, n: n, salt: salt}); err != nil {
							return err
						}
					}
					for _, m := range chunks {
						salt++
						c := kase{d: d, v: v, redop: op, n: m, salt: salt}
						if err := reduceScatter(w.Groups, c, salt%2 == 0); err != nil {
							return err
						}
					}
				}
				for _, m := range chunks {
					salt++
					c := kase{d: d, v: v, n: m, salt: salt}
					if err := allGather(w.Groups, c, salt%2 == 0); err != nil {
						return err
					}
					if err := allToAll(w.Groups, c); err != nil {
						return err
					}
				}
				for _, n := range append(sizes, 9001) {
					for _, root := range []int{0, p - 1, p / 2} {
						salt++
						if err := broadcast(w.Groups, kase{d: d, v: v, n: n, root: root, salt: salt}); err != nil {
							return err
						}
					}
				}
			}
		}
		return nil
	}
}

// large runs each op once on large buffers.
func large(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		n := e.large
		steps := []func() error{
			func() error {
				return allReduce(w.Groups, kase{d: tensor.F32, v: reals, redop: comm.Sum, n: n + 3, salt: 1})
			},
			func() error {
				return allReduce(w.Groups, kase{d: tensor.BF16, v: reals, redop: comm.Avg, n: n, salt: 2})
			},
			func() error {
				return reduceScatter(w.Groups, kase{d: tensor.F32, v: reals, redop: comm.Max, n: n / p, salt: 3}, true)
			},
			func() error { return reduceScatter(w.Groups, kase{d: tensor.BF16, v: ints, n: n / p, salt: 4}, false) },
			func() error { return allGather(w.Groups, kase{d: tensor.BF16, v: reals, n: n/p + 1, salt: 5}, false) },
			func() error {
				return broadcast(w.Groups, kase{d: tensor.F32, v: reals, n: n + 1, root: p - 1, salt: 6})
			},
			func() error { return allToAll(w.Groups, kase{d: tensor.F32, v: reals, n: n / p, salt: 7}) },
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return err
			}
		}
		return nil
	}
}

// allReduce checks every rank gets the reduction, bit-identical everywhere.
func allReduce(gs []comm.Group, c kase) error {
	p := len(gs)
	bufs, xs := c.inputs(p, c.n)
	if err := each(gs, func(r int, g comm.Group) error { return comm.AllReduce(g, bufs[r], c.redop) }); err != nil {
		return fmt.Errorf("allreduce %v: %w", c, err)
	}
	e := reduceExpect(xs, c.redop, c.d, c.v)
	for r := range bufs {
		if err := e.check(bufs[r], 0); err != nil {
			return fmt.Errorf("allreduce %v (p=%d): rank %d: %w", c, p, r, err)
		}
		if err := sameBits(bufs[r], bufs[0]); err != nil {
			return fmt.Errorf("allreduce %v (p=%d): ranks 0 and %d differ: %w", c, p, r, err)
		}
	}
	return nil
}

// reduceScatter checks rank r gets chunk r of the reduction; inPlace makes
// dst rank r's own chunk of src.
func reduceScatter(gs []comm.Group, c kase, inPlace bool) error {
	p, m := len(gs), c.n
	srcs, xs := c.inputs(p, p*m)
	dsts := make([]comm.Buf, p)
	for r := range dsts {
		if inPlace {
			dsts[r] = srcs[r].Slice(r*m, (r+1)*m)
		} else {
			dsts[r] = newBuf(c.d, m)
		}
	}
	if err := each(gs, func(r int, g comm.Group) error { return comm.ReduceScatter(g, dsts[r], srcs[r], c.redop) }); err != nil {
		return fmt.Errorf("reducescatter %v in-place=%v: %w", c, inPlace, err)
	}
	for r := range dsts {
		e := reduceExpect(column(xs, r*m, (r+1)*m), c.redop, c.d, c.v)
		if err := e.check(dsts[r], 0); err != nil {
			return fmt.Errorf("reducescatter %v in-place=%v (p=%d): rank %d: %w", c, inPlace, p, r, err)
		}
	}
	return nil
}

// allGather checks every rank gets every rank's src in rank order; inPlace
// makes src rank r's own chunk of dst.
func allGather(gs []comm.Group, c kase, inPlace bool) error {
	p, m := len(gs), c.n
	ins, xs := c.inputs(p, m)
	dsts, srcs := make([]comm.Buf, p), make([]comm.Buf, p)
	for r := range dsts {
		dsts[r] = newBuf(c.d, p*m)
		srcs[r] = ins[r]
		if inPlace {
			srcs[r] = dsts[r].Slice(r*m, (r+1)*m)
			copyInto(srcs[r], ins[r])
		}
	}
	if err := each(gs, func(r int, g comm.Group) error { return comm.AllGather(g, dsts[r], srcs[r]) }); err != nil {
		return fmt.Errorf("allgather %v in-place=%v: %w", c, inPlace, err)
	}
	for r := range dsts {
		for q := 0; q < p; q++ {
			if err := exact(dsts[r], q*m, xs[q]); err != nil {
				return fmt.Errorf("allgather %v in-place=%v (p=%d): rank %d, chunk of rank %d: %w", c, inPlace, p, r, q, err)
			}
		}
	}
	return nil
}

func copyInto(dst, src comm.Buf) {
	if dst.DType() == tensor.BF16 {
		copy(dst.BFloat16s(), src.BFloat16s())
	} else {
		copy(dst.Float32s(), src.Float32s())
	}
}

// broadcast checks every rank gets the root's buffer.
func broadcast(gs []comm.Group, c kase) error {
	p := len(gs)
	bufs, xs := c.inputs(p, c.n)
	if err := each(gs, func(r int, g comm.Group) error { return comm.Broadcast(g, bufs[r], c.root) }); err != nil {
		return fmt.Errorf("broadcast %v: %w", c, err)
	}
	for r := range bufs {
		if err := exact(bufs[r], 0, xs[c.root]); err != nil {
			return fmt.Errorf("broadcast %v (p=%d): rank %d: %w", c, p, r, err)
		}
	}
	return nil
}

// allToAll checks dst chunk q of rank r is src chunk r of rank q.
func allToAll(gs []comm.Group, c kase) error {
	p, m := len(gs), c.n
	srcs, xs := c.inputs(p, p*m)
	dsts := make([]comm.Buf, p)
	for r := range dsts {
		dsts[r] = newBuf(c.d, p*m)
	}
	if err := each(gs, func(r int, g comm.Group) error { return comm.AllToAll(g, dsts[r], srcs[r]) }); err != nil {
		return fmt.Errorf("alltoall %v: %w", c, err)
	}
	for r := range dsts {
		for q := 0; q < p; q++ {
			if err := exact(dsts[r], q*m, xs[q][r*m:(r+1)*m]); err != nil {
				return fmt.Errorf("alltoall %v (p=%d): rank %d, chunk from rank %d: %w", c, p, r, q, err)
			}
		}
	}
	return nil
}
