package zero

import "trellis/optim"

// UpdateScaled is Update for gradients that hold S·g (fp16 loss scaling,
// inv = 1/S). The global norm of S·g is all-reduced over the ranks, so an
// overflow in any rank's chunk makes it non-finite everywhere: then every
// rank skips the step (skipped true, weights and moments unchanged, nothing
// to gather). Otherwise each chunk's AdamW steps on g clipped to maxNorm:
//
//	norm = ‖S·g‖·inv      g' = S·g · inv · ClipScale(norm, maxNorm)
func (s *Strategy) UpdateScaled(lr, maxNorm, inv float64) (norm float64, skipped bool, err error) {
	if s.cfg.Stage == 3 {
		if err := s.dropGathered(); err != nil {
			return 0, false, err
		}
	}
	n, err := s.globalNorm()
	if err != nil {
		return 0, false, err
	}
	norm, scale, skip := optim.ScaledClip(n, maxNorm, inv)
	if skip {
		return norm, true, nil
	}
	for i := range s.bk {
		s.bk[i].opt.Step(lr, scale)
	}
	s.publish()
	return norm, false, nil
}
