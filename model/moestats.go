package model

import "fmt"

// ExpertStats are an MoE model's routing counts over the training
// micro-batches a runner's forward passes routed since the last
// TakeExpertStats (a recomputed forward is not counted twice; evaluation
// passes are not counted).
type ExpertStats struct {
	// Layers are the MoE blocks (0-based), Load[i][e] the assignments the
	// router of block Layers[i] gave expert e (before capacity) and
	// Dropped[i][e] those past its capacity.
	Layers        []int
	Load, Dropped [][]int64
	// RecvMax[i] is the most rows block Layers[i]'s experts on this rank
	// computed in one forward pass: what its dispatch received from the
	// expert-parallel group (its dispatch buffers' high-water mark), or
	// without expert parallelism the rows it kept.
	RecvMax []int64
	// Aux is the sum of the layers' load-balancing losses L_aux (with
	// aux_loss > 0) over the counted passes (each layer routes n·k
	// assignments a pass: Σ_e Load[i][e] / (n·k) passes).
	Aux float64
}

// expertCounter accumulates ExpertStats.
type expertCounter struct {
	index map[int]int // block → row of Load
	s     ExpertStats
}

func newExpertCounter(c Config) *expertCounter {
	ec := &expertCounter{index: map[int]int{}}
	for l := 0; l < c.Layers; l++ {
		if c.MoELayer(l) {
			ec.index[l] = len(ec.s.Layers)
			ec.s.Layers = append(ec.s.Layers, l)
			ec.s.Load = append(ec.s.Load, make([]int64, c.Experts))
			ec.s.Dropped = append(ec.s.Dropped, make([]int64, c.Experts))
			ec.s.RecvMax = append(ec.s.RecvMax, 0)
		}
	}
	return ec
}

// add counts one pass's routing of block layer.
func (ec *expertCounter) add(layer int, r routing, aux float64, hasAux bool) {
	i, ok := ec.index[layer]
	if !ok {
		return
	}
	for e, n := range r.load {
		ec.s.Load[i][e] += int64(n)
	}
	for k, e := range r.experts {
		if r.rows[k] < 0 {
			ec.s.Dropped[i][e]++
		}
	}
	if hasAux {
		ec.s.Aux += aux
	}
}

// recv records that block layer's experts computed rows rows in a pass.
func (ec *expertCounter) recv(layer, rows int) {
	if i, ok := ec.index[layer]; ok {
		ec.s.RecvMax[i] = max(ec.s.RecvMax[i], int64(rows))
	}
}

// TakeExpertStats returns the counts since the last call and starts
// again from zero (nil Layers for a dense model).
func (m *GPT) TakeExpertStats() ExpertStats {
	s := m.stats.s
	out := ExpertStats{Layers: s.Layers, Aux: s.Aux, RecvMax: append([]int64(nil), s.RecvMax...)}
	clear(s.RecvMax)
	for i := range s.Layers {
		out.Load = append(out.Load, append([]int64(nil), s.Load[i]...))
		out.Dropped = append(out.Dropped, append([]int64(nil), s.Dropped[i]...))
		clear(s.Load[i])
		clear(s.Dropped[i])
	}
	m.stats.s.Aux = 0
	return out
}

// ShareRouting makes m count its routing into with's statistics and
// route by with's expert biases: a second runner of the same rank (train's
// pair under ep_overlap=on), whose forwards then add to the one
// ExpertStats in the order the rank runs them. m and with must be runners
// of the same model and part; the two must not run passes at the same
// time but in turn (parallel/pp's Token).
func (m *GPT) ShareRouting(with *GPT) error {
	if m.cfg != with.cfg || m.part != with.part {
		return fmt.Errorf("model: ShareRouting between runners of different models or parts")
	}
	m.stats, m.bias = with.stats, with.bias
	return nil
}
