package train

import (
	"trellis/comm"
	"trellis/metrics"
)

// expertStats is the step's routing over the world (nil for a dense
// model): every rank's counts of its MoE blocks (a block lives on one
// pipeline stage, its counts on every data-parallel replica of it) summed
// by one all-reduce, and the aux loss averaged over the micro-batches of
// the global batch (accum per replica). The counts travel as fp32, exact
// below 2^24 assignments per expert and step.
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
	buf := make([]float32, 2*n*E+1)
	if r.top.part.Rank == 0 { // every rank of a tensor-parallel group routes the same tokens: count them once
		for i, l := range st.Layers {
			k := row[l]
			for e := range E {
				buf[k*E+e] = float32(st.Load[i][e])
				buf[(n+k)*E+e] = float32(st.Dropped[i][e])
			}
		}
		buf[2*n*E] = float32(st.Aux)
	}
	if r.world.Size() > 1 {
		if err := comm.AllReduce(r.world, comm.F32(buf), comm.Sum); err != nil {
			return nil, err
		}
	}
	for k := range n {
		load, drop := make([]int64, E), make([]int64, E)
		for e := range E {
			load[e], drop[e] = int64(buf[k*E+e]), int64(buf[(n+k)*E+e])
		}
		out.Load, out.Dropped = append(out.Load, load), append(out.Dropped, drop)
	}
	out.AuxLoss = float64(buf[2*n*E]) / float64(accum*r.set.enginePlan.DP)
	return out, nil
}
