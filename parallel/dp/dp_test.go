package dp

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/ops"
	pt "trellis/parallel/dptest"
)

func build(c Config) pt.Builder {
	return func(world comm.Group, dev *device.Device, k *ops.Kernels) (pt.Strategy, error) {
		g, _, err := pt.Groups(world)
		if err != nil {
			return nil, err
		}
		rc := c // per rank
		rc.Group, rc.Device, rc.Kernels, rc.Decay, rc.Hyper = g, dev, k, pt.Decay(c.Model), pt.Hyper
		return New(rc)
	}
}

// Data parallelism on 2 and 4 ranks, with and without accumulation,
// overlap and bucketing, matches the single device: losses and norms per
// step within 1e-5 relative, final state within 1e-5 in relative L2; and
// every rank holds the whole 16Ψ of state.
func TestMatchesSingleDevice(t *testing.T) {
	base := pt.Job{Model: pt.Tiny, Ranks: 1, MB: 2, Global: 8, Steps: 3, Clip: 0.5}
	ref := base.Run(t, pt.Reference(pt.Tiny))
	psi := int64(pt.Tiny.NumParams())
	i := 0
	for _, ranks := range []int{2, 4} {
		for _, mb := range []int{2, 1} {
			for _, overlap := range []bool{true, false} {
				i++
				c := Config{Model: pt.Tiny, BucketElems: []int{0, 900, 1 << 20}[i%3], Overlap: overlap}
				j := base
				j.Ranks, j.MB = ranks, mb
				t.Run(fmt.Sprintf("ranks%d/mb%d/overlap=%v/bucket%d", ranks, mb, overlap, c.BucketElems), func(t *testing.T) {
					got := j.Run(t, build(c))
					for s := range ref.Losses {
						if d := math.Abs(got.Losses[s] - ref.Losses[s]); d > 1e-5*ref.Losses[s] {
							t.Errorf("step %d: loss %.9g, want %.9g", s+1, got.Losses[s], ref.Losses[s])
						}
						if d := math.Abs(got.Norms[s] - ref.Norms[s]); d > 1e-5*ref.Norms[s] {
							t.Errorf("step %d: norm %.9g, want %.9g", s+1, got.Norms[s], ref.Norms[s])
						}
					}
					for _, x := range []struct {
						what      string
						got, want []float32
					}{{"weights", got.W, ref.W}, {"first moments", got.M, ref.M}, {"second moments", got.V, ref.V}} {
						if err := pt.CloseTo(x.got, x.want, 1e-5); err != nil {
							t.Errorf("%s: %v", x.what, err)
						}
					}
					for r, d := range got.Devs {
						st := d.Stats()
						if st.Peak[device.Param] != 4*psi || st.Peak[device.Grad] != 4*psi || st.Peak[device.Optim] != 8*psi || st.Peak[device.Comm] != 0 {
							t.Errorf("rank %d: peaks %v, want 4Ψ, 4Ψ, 8Ψ and no comm (Ψ=%d)", r, st.Peak, psi)
						}
					}
				})
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	world, err := local.New(local.Config{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer world[0].Close()
	good := Config{Model: pt.Tiny, Group: world[0], Device: device.New(device.Config{})}
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Group = nil }, "Group is nil"},
		{func(c *Config) { c.Device = nil }, "Device is nil"},
		{func(c *Config) { c.BucketElems = -1 }, "BucketElems=-1"},
		{func(c *Config) { c.Model.Heads = 3 }, "heads"},
	}
	for _, c := range cases {
		cfg := good
		c.edit(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one mentioning %q", err, c.want)
		}
	}
}
