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
// and a Llama's as Hugging Face's LlamaPreTrainedModel initialises them
// (initializer_range 0.02): RMSNorm weights 1, every other weight
// (embedding, projections, head) ~ N(0, 0.02²).
//
// Element i of tensor "name" is rng.Key(seed, name).Normal(i), i its index
// in the whole tensor, so a rank that initialises only its shard gets
// exactly the global weights of a single device.
func InitRange(cfg Config, seed uint64, dst []float32, lo, hi int) error {
	return InitPart(cfg, Part{}, seed, dst, lo, hi)
}

// InitPart is InitRange for the local flat vector of part p (PartLayout):
// each local element gets the value of the global element it holds, so
// every tensor-parallel split has the same global weights; padding is 0.
func InitPart(cfg Config, p Part, seed uint64, dst []float32, lo, hi int) error {
	return InitPartWith(cfg, p, Init{Seed: seed}, dst, lo, hi)
}

// Init is where initial weights come from: GPT-2's initialisation keyed by
// Seed or, when Weights is set, those global weights (cfg.Layout() order,
// e.g. a Hugging Face model to fine-tune). Either way every element is a
// function of its global index, so every plan starts from the same model.
type Init struct {
	Seed    uint64
	Weights []float32 // (Layout.Size) global weights; nil: from Seed
}

// InitPartWith is InitPart from in: the local elements [lo, hi) of part p
// get the values of the global elements they hold; padding is 0.
func InitPartWith(cfg Config, p Part, in Init, dst []float32, lo, hi int) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := p.Validate(cfg); err != nil {
		return err
	}
	lay := cfg.PartLayout(p)
	if lo < 0 || hi > lay.Size || lo > hi || len(dst) != hi-lo {
		return fmt.Errorf("model: InitRange [%d, %d) with %d values: want 0 <= lo <= hi <= %d and len(dst) = hi−lo", lo, hi, len(dst), lay.Size)
	}
	return InitLocal(cfg, lay, in, dst, lo)
}

// InitLocal writes the initial values of the elements [lo, lo+len(dst))
// of a rank's local flat vector laid out as local (any part of cfg: a
// tensor-parallel split, a pipeline stage's units): each gets the value of
// the global element it holds, from in; padding is 0.
func InitLocal(cfg Config, local Layout, in Init, dst []float32, lo int) error {
	hi := lo + len(dst)
	if lo < 0 || hi > local.Size {
		return fmt.Errorf("model: init of [%d, %d) of a layout of %d elements", lo, hi, local.Size)
	}
	var global Layout
	if in.Weights != nil {
		if global = cfg.Layout(); len(in.Weights) != global.Size {
			return fmt.Errorf("model: %d initial weights, the model has %d", len(in.Weights), global.Size)
		}
	}
	resid := InitStd / math.Sqrt(2*float64(cfg.Layers))
	for _, u := range local.Units {
		if u.Offset >= hi || u.Offset+u.Size <= lo {
			continue
		}
		for _, t := range u.Tensors {
			a, b := max(lo, t.Offset), min(hi, t.Offset+t.Size)
			if a >= b {
				continue
			}
			if in.Weights != nil {
				g, _ := global.Tensor(t.Name)
				copyTensor(t, in.Weights[g.Offset:g.Offset+g.Size], dst[a-lo:b-lo], a-t.Offset)
				continue
			}
			initTensor(t, in.Seed, resid, dst[a-lo:b-lo], a-t.Offset)
		}
	}
	return nil
}

// initTensor writes the initial values of t's local elements [at,
// at+len(out)), mapping them to global indices through t.Global.
func initTensor(t Tensor, seed uint64, resid float64, out []float32, at int) {
	switch {
	case strings.HasSuffix(t.Name, "ln_1.weight"), strings.HasSuffix(t.Name, "ln_2.weight"), t.Name == "ln_f.weight",
		strings.HasSuffix(t.Name, "layernorm.weight"), t.Name == "norm.weight":
		for i := range out {
			out[i] = 1
		}
		return
	case strings.HasSuffix(t.Name, ".bias"):
		clear(out)
		return
	}
	std := InitStd
	if strings.HasSuffix(t.Name, "c_proj.weight") {
		std = resid
	}
	clear(out) // padding stays 0
	key := rng.Key(seed, t.Name)
	end := at + len(out)
	t.Global.Runs(t.Valid(), func(local, global, n int) {
		a, b := max(at, local), min(end, local+n)
		if a < b {
			key.FillNormal(out[a-at:b-at], uint64(global+a-local), 0, std)
		}
	})
}

// copyTensor writes t's local elements [at, at+len(out)) from the whole
// global tensor src, mapping them through t.Global; padding is 0.
func copyTensor(t Tensor, src, out []float32, at int) {
	clear(out)
	end := at + len(out)
	t.Global.Runs(t.Valid(), func(local, global, n int) {
		a, b := max(at, local), min(end, local+n)
		if a < b {
			copy(out[a-at:b-at], src[global+a-local:global+b-local])
		}
	})
}
