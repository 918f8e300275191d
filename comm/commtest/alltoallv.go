package commtest

import (
	"errors"
	"fmt"

	"trellis/comm"
	"trellis/tensor"
)

// allToAllV: rank i sends (i+j) mod 3 + k·j elements to rank j (some
// empty), on fp32 and bf16, twice, the second time with a collective in
// flight; every segment arrives where its counts say, bit for bit, and
// inconsistent counts fail with ErrArgs.
func allToAllV(p int) func(e *env) error {
	return func(e *env) error {
		w := e.world(p, normalTimeout)
		count := func(i, j, k int) int { return (i+j)%3 + k*j }
		for k, d := range []tensor.DType{tensor.F32, tensor.BF16} {
			err := each(w.Groups, func(r int, g comm.Group) error {
				send, recv := make([]int, p), make([]int, p)
				var parts []msg
				for j := range p {
					send[j], recv[j] = count(r, j, k), count(j, r, k)
					parts = append(parts, message(d, r, 100*j+k, send[j]))
				}
				src := newBuf(d, sum(send))
				for j, off := 0, 0; j < p; j++ {
					copyInto(src.Slice(off, off+send[j]), parts[j].buf)
					off += send[j]
				}
				dst := newBuf(d, sum(recv))
				sumBuf := []float32{1}
				ar := g.AllReduce(comm.F32(sumBuf), comm.Sum) // a collective in flight meanwhile
				if err := comm.AllToAllV(g, dst, src, send, recv, 11); err != nil {
					return err
				}
				if err := ar.Wait(); err != nil || sumBuf[0] != float32(p) {
					return fmt.Errorf("all-reduce alongside: %v, sum %g", err, sumBuf[0])
				}
				for i, off := 0, 0; i < p; i++ {
					if err := exact(dst, off, message(d, i, 100*r+k, recv[i]).xs); err != nil {
						return fmt.Errorf("segment from rank %d: %w", i, err)
					}
					off += recv[i]
				}
				bad := append([]int(nil), send...)
				bad[0]++
				if err := comm.AllToAllV(g, dst, src, bad, recv, 11); !errors.Is(err, comm.ErrArgs) {
					return fmt.Errorf("counts not summing to len(src): got %v, want ErrArgs", err)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("alltoallv %v (p=%d): %w", d, p, err)
			}
		}
		return nil
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
