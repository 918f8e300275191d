package pp

import "trellis/optim"

// UpdateScaled is Update for gradients that hold S·g (fp16 loss scaling,
// inv = 1/S). The global norm of S·g adds over the data-parallel group
// (ZeRO-1), the pipeline and the tensor-parallel group, and under ZeRO-0
// the gradients were averaged over the replicas, so an overflow on any
// rank makes it non-finite on every rank: then every rank skips the step
// (skipped true, weights and moments unchanged, nothing to gather).
// Otherwise AdamW steps on g clipped to maxNorm:
//
//	norm = ‖S·g‖·inv      g' = S·g · inv · ClipScale(norm, maxNorm)
func (s *State) UpdateScaled(lr, maxNorm, inv float64) (norm float64, skipped bool, err error) {
	n, err := s.globalNorm()
	if err != nil {
		return 0, false, err
	}
	norm, scale, skip := optim.ScaledClip(n, maxNorm, inv)
	if skip {
		return norm, true, nil
	}
	s.opt.Step(lr, scale)
	return norm, false, s.gatherWeights()
}
