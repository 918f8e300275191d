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

// allReduce checks every rank gets the reduction, bit-identical everywhere
// (each rank compares its result with rank 0's, broadcast).
func allReduce(gs []comm.Group, c kase) error {
	p := len(gs)
	bufs, xs := c.inputs(p, c.n)
	e := reduceExpect(xs, c.redop, c.d, c.v)
	err := each(gs, func(r int, g comm.Group) error {
		if err := comm.AllReduce(g, bufs[r], c.redop); err != nil {
			return err
		}
		if err := e.check(bufs[r], 0); err != nil {
			return err
		}
		ref := clone(bufs[r])
		if err := comm.Broadcast(g, ref, 0); err != nil {
			return err
		}
		if err := sameBits(bufs[r], ref); err != nil {
			return fmt.Errorf("differs from rank 0: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("allreduce %v (p=%d): %w", c, p, err)
	}
	return nil
}

// reduceScatter checks rank r gets chunk r of the reduction; inPlace makes
// dst rank r's own chunk of src.
func reduceScatter(gs []comm.Group, c kase, inPlace bool) error {
	p, m := len(gs), c.n
	srcs, xs := c.inputs(p, p*m)
	err := each(gs, func(r int, g comm.Group) error {
		dst := newBuf(c.d, m)
		if inPlace {
			dst = srcs[r].Slice(r*m, (r+1)*m)
		}
		if err := comm.ReduceScatter(g, dst, srcs[r], c.redop); err != nil {
			return err
		}
		return reduceExpect(column(xs, r*m, (r+1)*m), c.redop, c.d, c.v).check(dst, 0)
	})
	if err != nil {
		return fmt.Errorf("reducescatter %v in-place=%v (p=%d): %w", c, inPlace, p, err)
	}
	return nil
}

// allGather checks every rank gets every rank's src in rank order; inPlace
// makes src rank r's own chunk of dst.
func allGather(gs []comm.Group, c kase, inPlace bool) error {
	p, m := len(gs), c.n
	ins, xs := c.inputs(p, m)
	err := each(gs, func(r int, g comm.Group) error {
		dst, src := newBuf(c.d, p*m), ins[r]
		if inPlace {
			src = dst.Slice(r*m, (r+1)*m)
			copyInto(src, ins[r])
		}
		if err := comm.AllGather(g, dst, src); err != nil {
			return err
		}
		for q := 0; q < p; q++ {
			if err := exact(dst, q*m, xs[q]); err != nil {
				return fmt.Errorf("chunk of rank %d: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("allgather %v in-place=%v (p=%d): %w", c, inPlace, p, err)
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
	err := each(gs, func(r int, g comm.Group) error {
		if err := comm.Broadcast(g, bufs[r], c.root); err != nil {
			return err
		}
		return exact(bufs[r], 0, xs[c.root])
	})
	if err != nil {
		return fmt.Errorf("broadcast %v (p=%d): %w", c, p, err)
	}
	return nil
}

// allToAll checks dst chunk q of rank r is src chunk r of rank q.
func allToAll(gs []comm.Group, c kase) error {
	p, m := len(gs), c.n
	srcs, xs := c.inputs(p, p*m)
	err := each(gs, func(r int, g comm.Group) error {
		dst := newBuf(c.d, p*m)
		if err := comm.AllToAll(g, dst, srcs[r]); err != nil {
			return err
		}
		for q := 0; q < p; q++ {
			if err := exact(dst, q*m, xs[q][r*m:(r+1)*m]); err != nil {
				return fmt.Errorf("chunk from rank %d: %w", q, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("alltoall %v (p=%d): %w", c, p, err)
	}
	return nil
}
