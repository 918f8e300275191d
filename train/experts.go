package train

import (
	"trellis/comm"
	"trellis/metrics"
)

// expertStats is the step's routing over the world (nil for a dense
// model): every rank's counts of its MoE blocks (a block lives on one
// pipeline stage, its counts on every data-parallel replica of it) summed
// by one all-reduce, the aux loss averaged over the micro-batches of the
// global batch (accum per replica), and each block's most rows on one
// rank in one forward (a max all-reduce). Each count v travels as two
// fp32 pieces, v >> 12 and v & 4095, whose sums are exact (below 2^24)
// for up to 4096 ranks and 2^36 assignments per expert and step: the
// expert biases' update reads these loads, so every rank must get the
// same integers, the one device's.
func (r *rank) expertStats(accum int) (*metrics.Experts, error) {
	c := r.job.Model
	if c.Experts <= 0 || r.gpt == nil {
		return nil, nil
	}
	st := r.gpt.TakeExpertStats()
	out := &metrics.Experts{}
	row := map[int]int{}
	for l := range c.Layers {
		if c.MoELayer(l) {
			row[l] = len(out.Layers)
			out.Layers = append(out.Layers, l)
		}
	}
	E, n := c.Experts, len(out.Layers)
	const lo = 1<<12 - 1
	buf := make([]float32, 4*n*E+1) // load hi, load lo, dropped hi, dropped lo
	recv := make([]float32, n)
	tp0 := r.top.part.Rank == 0 // every rank of a tensor-parallel group routes the same tokens: count them once
	for i, l := range st.Layers {
		k := row[l]
		if tp0 {
			for e := range E {
				for j, v := range []int64{st.Load[i][e], st.Dropped[i][e]} {
					buf[(2*j*n+k)*E+e], buf[((2*j+1)*n+k)*E+e] = float32(v>>12), float32(v&lo)
				}
			}
		}
		recv[k] = float32(st.RecvMax[i])
	}
	if tp0 {
		buf[4*n*E] = float32(st.Aux)
	}
	if r.world.Size() > 1 {
		if err := comm.AllReduce(r.world, comm.F32(buf), comm.Sum); err != nil {
			return nil, err
		}
		if err := comm.AllReduce(r.world, comm.F32(recv), comm.Max); err != nil {
			return nil, err
		}
	}
	count := func(j, k, e int) int64 {
		return int64(buf[(2*j*n+k)*E+e])<<12 + int64(buf[((2*j+1)*n+k)*E+e])
	}
	for k := range n {
		load, drop := make([]int64, E), make([]int64, E)
		for e := range E {
			load[e], drop[e] = count(0, k, e), count(1, k, e)
		}
		out.Load, out.Dropped = append(out.Load, load), append(out.Dropped, drop)
		out.RecvRowsMax = append(out.RecvRowsMax, int64(recv[k]))
	}
	out.AuxLoss = float64(buf[4*n*E]) / float64(accum*r.set.enginePlan.DP)
	return out, nil
}
