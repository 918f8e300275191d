package zero

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/ops"
	pt "trellis/parallel/dptest"
)

// build returns a builder of strategies over the whole model with their
// own gradient and parameter groups over the whole world.
func build(c Config) pt.Builder {
	return func(world comm.Group, dev *device.Device, k ops.Backend, accum int) (pt.Strategy, error) {
		g, p, err := pt.Groups(world)
		if err != nil {
			return nil, err
		}
		rc := c // per rank: c is shared by the ranks' goroutines
		rc.Grads, rc.Params, rc.Device, rc.Kernels, rc.Hyper = g, p, dev, k, pt.Hyper
		if len(rc.Layout.Units) == 0 {
			rc.Layout = c.Model.Layout()
		}
		rc.Order.Train, rc.Order.Eval = pt.WholeOrder(c.Model, accum)
		return New(rc)
	}
}

// reference is the single-device strategy every plan must match, for a
// job of one rank: stage 0 over a group of one.
func reference() pt.Builder { return build(Config{Model: pt.Tiny}) }

// Every stage on 1, 2 and 4 ranks, with and without gradient accumulation,
// overlap and prefetch, with buckets of one unit, several units and the
// whole model, matches the single device: per-step losses and gradient
// norms within 1e-5 relative, final weights and Adam moments too.
func TestStagesMatchSingleDevice(t *testing.T) {
	base := pt.Job{Model: pt.Tiny, Ranks: 1, MB: 2, Global: 8, Steps: 3, Clip: 0.5}
	ref := base.Run(t, reference())
	buckets := []int{0, 900, 1 << 20}
	i := 0
	for stage := 0; stage <= 3; stage++ {
		for _, ranks := range []int{1, 2, 4} {
			for _, mb := range []int{2, 1} { // accumulation: global/(ranks·mb) micro-batches
				i++
				c := Config{Model: pt.Tiny, Stage: stage, BucketElems: buckets[i%3], Overlap: i%2 == 0, Prefetch: i%4 < 2}
				j := base
				j.Ranks, j.MB = ranks, mb
				name := fmt.Sprintf("stage%d/ranks%d/mb%d/bucket%d/overlap=%v/prefetch=%v", stage, ranks, mb, c.BucketElems, c.Overlap, c.Prefetch)
				t.Run(name, func(t *testing.T) {
					got := j.Run(t, build(c))
					compare(t, got, ref)
				})
			}
		}
	}
}

func compare(t *testing.T, got, ref pt.Outcome) {
	t.Helper()
	for s := range ref.Losses {
		for _, x := range []struct {
			what      string
			got, want float64
		}{{"loss", got.Losses[s], ref.Losses[s]}, {"grad norm", got.Norms[s], ref.Norms[s]}} {
			if math.Abs(x.got-x.want) > 1e-5*math.Abs(x.want) {
				t.Errorf("step %d: %s %.9g, want %.9g", s+1, x.what, x.got, x.want)
			}
		}
	}
	if ref.Norms[0] < 0.5 {
		t.Fatalf("the test does not exercise clipping: first norm %g", ref.Norms[0])
	}
	for _, x := range []struct {
		what      string
		got, want []float32
	}{{"weights", got.W, ref.W}, {"first moments", got.M, ref.M}, {"second moments", got.V, ref.V}} {
		if err := pt.CloseTo(x.got, x.want, 1e-5); err != nil {
			t.Errorf("%s: %v", x.what, err)
		}
	}
}

// The same plan twice gives bit-identical results, whatever the
// scheduling of the goroutines.
func TestDeterministic(t *testing.T) {
	j := pt.Job{Model: pt.Tiny, Ranks: 4, MB: 1, Global: 8, Steps: 2}
	c := Config{Model: pt.Tiny, Stage: 3, Overlap: true, Prefetch: true}
	a, b := j.Run(t, build(c)), j.Run(t, build(c))
	if !reflect.DeepEqual(a.Losses, b.Losses) || !reflect.DeepEqual(a.W, b.W) || !reflect.DeepEqual(a.M, b.M) || !reflect.DeepEqual(a.V, b.V) {
		t.Errorf("two identical runs differ")
	}
}

func TestConfigValidate(t *testing.T) {
	world, err := local.New(local.Config{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer world[0].Close()
	other, err := local.New(local.Config{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other[0].Close()
	k, _ := ops.New(ops.Config{Threads: 1})
	good := Config{Model: pt.Tiny, Layout: pt.Tiny.Layout(), Stage: 2, Grads: world[0], Params: world[0], Device: device.New(device.Config{}), Kernels: k}
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Stage = -1 }, "stage=-1"},
		{func(c *Config) { c.Stage = 4 }, "stage=4"},
		{func(c *Config) { c.Params = nil }, "Params must be set"},
		{func(c *Config) { c.Params = other[0] }, "differ"},
		{func(c *Config) { c.Device = nil }, "Device is nil"},
		{func(c *Config) { c.BucketElems = -2 }, "BucketElems=-2"},
		{func(c *Config) { c.Layout = Config{}.Layout }, "no units"},
		{func(c *Config) { c.Kernels = nil }, "Kernels is nil"},
		{func(c *Config) { c.Tied = world[0] }, "go together"},
	}
	for _, c := range cases {
		cfg := good
		c.edit(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one mentioning %q", err, c.want)
		}
	}
	if _, err := (Shape{Layout: pt.Tiny.Layout(), Stage: 3, Ranks: 2, Rank: 2}).Memory(); err == nil {
		t.Errorf("Shape with rank 2 of 2 accepted")
	}
}
