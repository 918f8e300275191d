package single

import "trellis/optim"

// UpdateScaled is Update for gradients that hold S·g (fp16 loss scaling,
// inv = 1/S): if the global norm of S·g is not finite (an overflow on any
// rank poisons the global norm) nothing changes and skipped is true;
// otherwise AdamW steps on g clipped to maxNorm:
//
//	norm = ‖S·g‖·inv      g' = S·g · inv · ClipScale(norm, maxNorm)
func (s *Strategy) UpdateScaled(lr, maxNorm, inv float64) (norm float64, skipped bool, err error) {
	n, err := s.norm()
	if err != nil {
		return 0, false, err
	}
	norm, scale, skip := optim.ScaledClip(n, maxNorm, inv)
	if skip {
		return norm, true, nil
	}
	s.opt.Step(lr, scale)
	return norm, false, nil
}
