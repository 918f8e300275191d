package train

import (
	"errors"
	"fmt"

	"trellis/comm"
	"trellis/mesh"
	"trellis/metrics"
	"trellis/model"
	"trellis/parallel/tp"
	"trellis/plan"
)

// CommBytes are the payload bytes a rank passed to collectives over the
// run, per mesh axis (an all-reduce or broadcast counts its buffer, a
// reduce-scatter its input, an all-gather its output).
type CommBytes = metrics.CommBytes

// commBytes reads the rank's counters; dp holds the strategy's.
func (r *rank) commBytes(dp comm.Stats) CommBytes {
	b := CommBytes{DP: dp.Bytes}
	if r.tpGroup != nil {
		b.TP = r.tpGroup.Stats().Bytes
	}
	return b
}

// checkTP rejects, before anything starts, a tensor-parallel plan the model
// or the devices cannot run: one line per broken rule, naming the numbers.
func checkTP(j Job, p plan.Plan) error {
	var errs []error
	if j.Parallel.Devices != 0 && p.TP > j.Parallel.Devices {
		errs = append(errs, fmt.Errorf("parallel.plan: tp=%d is larger than parallel.devices=%d", p.TP, j.Parallel.Devices))
	}
	if p.TP > 1 || p.SP {
		if err := (model.Part{TP: p.TP, SP: p.SP}).Validate(j.Model); err != nil {
			errs = append(errs, fmt.Errorf("parallel.plan: %w", err))
		}
	}
	return errors.Join(errs...)
}

// joinTP makes this rank's tensor-parallel group, the ranks along the
// mesh's tp axis (the fastest), and the model part it computes.
func (r *rank) joinTP(p plan.Plan) error {
	if p.TP == 1 {
		return nil
	}
	m, err := r.mesh(p)
	if err != nil {
		return err
	}
	ranks, err := m.Group(r.id, mesh.TP)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	g, err := r.world.NewGroup("tp."+m.GroupName(mesh.TP), ranks)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.tpGroup = g
	if r.tp, err = tp.New(g); err != nil {
		return err
	}
	r.part = r.tp.Part(p.SP)
	c, err := m.Coords(r.id)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.dp = c.Get(mesh.DP) // the ranks of a tensor-parallel group read the same data
	return nil
}

// mesh is the plan's device mesh over the world.
func (r *rank) mesh(p plan.Plan) (*mesh.Mesh, error) {
	m, err := mesh.New(mesh.Config{PP: p.PP, DP: p.DP, CP: p.CP, TP: p.TP, Order: p.Order, World: r.world.Size()})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return m, nil
}

// tpComm is the model's view of the tensor-parallel group (nil: none).
func (r *rank) tpComm() model.TPComm {
	if r.tp == nil {
		return nil
	}
	return r.tp
}

// reduceNorm is the strategies' hook that sums the squared gradient norm
// over the tensor-parallel group (nil: none).
func (r *rank) reduceNorm() func(float64) (float64, error) {
	if r.tp == nil {
		return nil
	}
	return r.tp.ReduceNorm
}
