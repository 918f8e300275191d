package train

import (
	"fmt"

	"trellis/checkpoint"
	"trellis/parallel/flat"
)

// CheckpointWeights reads the global weights of a checkpoint written under
// any plan (tensors are indexed by name, whatever the sharding) as one flat
// vector in Meta.Job.Model.Layout() order, verifying the checkpoint first.
// The optimizer state is not read.
func CheckpointWeights(path string) (Meta, []float32, error) {
	var m Meta
	c, err := checkpoint.Open(path)
	if err != nil {
		return m, nil, err
	}
	if err := c.DecodeMeta(&m); err != nil {
		return m, nil, err
	}
	cfg := m.Job.Model
	if err := cfg.Validate(); err != nil {
		return m, nil, fmt.Errorf("%s: %w", c.Dir(), err)
	}
	lay := cfg.Layout()
	w := make([]float32, lay.Size)
	if err := flat.Read(c, flat.TensorsOf(lay), "", 0, w); err != nil {
		return m, nil, err
	}
	return m, w, nil
}
