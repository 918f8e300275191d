package precision

import (
	"strings"
	"testing"

	"trellis/tensor"
)

// fp8 is bf16 with a recipe: valid with the defaults, named "fp8", and
// refused by field with a bad setting or another compute dtype; recipes
// parse by name only.
func TestFP8Policy(t *testing.T) {
	for _, r := range []Recipe{Delayed, Blockwise} {
		p := FP8(DefaultFP8(r))
		if err := p.Validate(); err != nil || p.String() != "fp8" || p.Compute != tensor.BF16 || !p.Half() {
			t.Errorf("%s: %v, %s, compute %s", r, err, p, p.Compute)
		}
		if got, err := ParseRecipe(r.String()); err != nil || got != r {
			t.Errorf("ParseRecipe(%q) = %v, %v", r, got, err)
		}
	}
	if _, err := ParseRecipe("mxfp8"); err == nil || !strings.Contains(err.Error(), `"mxfp8"`) {
		t.Errorf("ParseRecipe(mxfp8): %v", err)
	}
	bad := func(edit func(*Policy)) Policy {
		p := FP8(DefaultFP8(Delayed))
		edit(&p)
		return p
	}
	for want, p := range map[string]Policy{
		"compute=fp16": bad(func(p *Policy) { p.Param, p.Compute, p.Stash = tensor.F16, tensor.F16, tensor.F16 }),
		"history=0":    bad(func(p *Policy) { p.F8.History = 0 }),
		"margin=-1":    bad(func(p *Policy) { p.F8.Margin = -1 }),
		"tile=0":       bad(func(p *Policy) { p.F8 = Float8{Recipe: Blockwise} }),
		"recipe 7":     bad(func(p *Policy) { p.F8.Recipe = 7 }),
	} {
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	if BF16().String() != "bf16" || BF16().F8.Recipe != NoFP8 {
		t.Error("bf16 carries an fp8 recipe")
	}
}
