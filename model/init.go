package model

import (
	"fmt"
	"math"
	"strings"

	"trellis/rng"
)

// InitStd is the standard deviation of GPT-2's weight initialisation.
const InitStd = 0.02

// InitRange writes GPT-2's initial values of the global flat parameter
// elements [lo, hi) into dst (len hi−lo):
//
//	LayerNorm weights 1, all biases 0,
//	attn.c_proj.weight and mlp.c_proj.weight ~ N(0, (0.02/√(2L))²)  (residual projections)
//	every other weight, wte and wpe included, ~ N(0, 0.02²)
//
// Element i of tensor "name" is rng.Key(seed, name).Normal(i), i its index
// in the whole tensor, so a rank that initialises only its shard gets
// exactly the global weights of a single device.
func InitRange(cfg Config, seed uint64, dst []float32, lo, hi int) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	lay := cfg.Layout()
	if lo < 0 || hi > lay.Size || lo > hi || len(dst) != hi-lo {
		return fmt.Errorf("model: InitRange [%d, %d) with %d values: want 0 <= lo <= hi <= %d and len(dst) = hi−lo", lo, hi, len(dst), lay.Size)
	}
	resid := InitStd / math.Sqrt(2*float64(cfg.Layers))
	for _, u := range lay.Units {
		if u.Offset >= hi || u.Offset+u.Size <= lo {
			continue
		}
		for _, t := range u.Tensors {
			a, b := max(lo, t.Offset), min(hi, t.Offset+t.Size)
			if a >= b {
				continue
			}
			out := dst[a-lo : b-lo]
			switch {
			case strings.HasSuffix(t.Name, "ln_1.weight"), strings.HasSuffix(t.Name, "ln_2.weight"), t.Name == "ln_f.weight":
				for i := range out {
					out[i] = 1
				}
			case strings.HasSuffix(t.Name, ".bias"):
				clear(out)
			case strings.HasSuffix(t.Name, "c_proj.weight"):
				rng.Key(seed, t.Name).FillNormal(out, uint64(a-t.Offset), 0, resid)
			default:
				rng.Key(seed, t.Name).FillNormal(out, uint64(a-t.Offset), 0, InitStd)
			}
		}
	}
	return nil
}
