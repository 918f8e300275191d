package train

import "trellis/parallel"

// Strategy is the rank's state placement under the plan (see
// parallel.Strategy).
type Strategy = parallel.Strategy
