package zero

import (
	"fmt"
	"sync"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	pt "trellis/parallel/dptest"
	"trellis/precision"
	"trellis/tensor"
)

// Under a mixed policy (stages 1 and 2, 2 ranks, bf16 and fp16): after
// Init every unit's Weights are handed out in 16-bit, the roundings of the
// single device's initial weights, on both ranks; the device holds
// exactly Shape.Memory (param 2P, optim 4P/N + 8·share) and nothing in
// workspace; the shards are the fp32 master weights, unrounded.
func TestHalfShardsMaster(t *testing.T) {
	n := pt.Tiny.NumParams()
	ref := make([]float32, n)
	if err := model.InitRange(pt.Tiny, 1, ref, 0, n); err != nil {
		t.Fatal(err)
	}
	lay := pt.Tiny.Layout()
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		r := func(x float32) float32 { return tensor.ToBF16(x).Float32() }
		if dt == tensor.F16 {
			r = func(x float32) float32 { return tensor.ToF16(x).Float32() }
		}
		for stage := 1; stage <= 2; stage++ {
			worlds, err := local.New(local.Config{Size: 2})
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for rank := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[rank] = checkHalfRank(worlds[rank], dt, stage, lay, ref, r)
				}()
			}
			wg.Wait()
			for rank, err := range errs {
				if err != nil {
					t.Errorf("%s stage %d rank %d: %v", dt, stage, rank, err)
				}
			}
		}
	}
}

func checkHalfRank(world comm.Group, dt tensor.DType, stage int, lay model.Layout, ref []float32, r func(float32) float32) error {
	g, p, err := pt.Groups(world)
	if err != nil {
		return err
	}
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		return err
	}
	pol := precision.BF16()
	if dt == tensor.F16 {
		pol = precision.FP16(1, 1)
	}
	dev := device.New(device.Config{})
	train, eval := pt.WholeOrder(pt.Tiny, 1)
	s, err := New(Config{Model: pt.Tiny, Layout: lay, Stage: stage, Grads: g, Params: p, Device: dev, Kernels: k,
		Hyper: pt.Hyper, Precision: pol, Order: Order{Train: train, Eval: eval}})
	if err != nil {
		return err
	}
	defer s.Free()
	if err := s.Init(model.Init{Seed: 1}); err != nil {
		return err
	}
	wide := make([]float32, lay.Size)
	for u, un := range lay.Units {
		w, err := s.Weights(u)
		if err != nil {
			return err
		}
		if w.DType() != dt {
			return fmt.Errorf("unit %d handed out in %s, want %s", u, w.DType(), dt)
		}
		k.Decode(wide[:un.Size], w)
		for i, x := range wide[:un.Size] {
			if want := r(ref[un.Offset+i]); x != want {
				return fmt.Errorf("unit %d element %d: %g, want the rounding %g of %g", u, i, x, want, ref[un.Offset+i])
			}
		}
		s.ReleaseWeights(u)
	}
	st, mem := dev.Stats(), s.Memory()
	if st.Live[device.Workspace] != 0 || st.Live[device.Param] != mem.Param || st.Live[device.Optim] != mem.Optim || st.Live[device.Grad] != mem.Grad {
		return fmt.Errorf("live workspace %d, param %d, optim %d, grad %d bytes; accounted 0, %d, %d, %d",
			st.Live[device.Workspace], st.Live[device.Param], st.Live[device.Optim], st.Live[device.Grad], mem.Param, mem.Optim, mem.Grad)
	}
	P := int64(s.bl.Padded)
	if mem.Param != 2*P || mem.Optim < 4*P/2 {
		return fmt.Errorf("accounted param %d, optim %d bytes: want 2P = %d and at least 4P/N = %d", mem.Param, mem.Optim, 2*P, 4*P/2)
	}
	for i := range s.bk {
		b := &s.bk[i]
		for j, x := range b.p[:b.valid] {
			if x != ref[b.lo+j] {
				return fmt.Errorf("master weight %d: %g, want %g unrounded", b.lo+j, x, ref[b.lo+j])
			}
		}
	}
	return nil
}

// Under a mixed policy stage 0 keeps the fp32 masters (optim) and their
// 16-bit rounding (param), and stage 3 rounds each fetched unit into a
// buffer of its own (param) freed with its last release.
func TestHalfStages0And3(t *testing.T) {
	for _, stage := range []int{0, 3} {
		worlds, err := local.New(local.Config{Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		g, p, err := pt.Groups(worlds[0])
		if err != nil {
			t.Fatal(err)
		}
		k, _ := ops.New(ops.Config{Threads: 1})
		dev := device.New(device.Config{})
		lay := pt.Tiny.Layout()
		train, eval := pt.WholeOrder(pt.Tiny, 1)
		s, err := New(Config{Model: pt.Tiny, Layout: lay, Stage: stage, Grads: g, Params: p, Device: dev, Kernels: k,
			Hyper: pt.Hyper, Precision: precision.BF16(), Order: Order{Train: train, Eval: eval}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Init(model.Init{Seed: 1}); err != nil {
			t.Fatal(err)
		}
		P := int64(s.bl.Padded)
		st := dev.Stats()
		switch stage {
		case 0:
			if st.Live[device.Param] != 2*P || st.Live[device.Optim] != 4*P+8*P {
				t.Errorf("stage 0: param %d optim %d bytes, want 2P = %d and 12P = %d", st.Live[device.Param], st.Live[device.Optim], 2*P, 12*P)
			}
		case 3:
			w, err := s.Weights(1)
			if err != nil {
				t.Fatal(err)
			}
			if got := dev.Stats().Live[device.Param]; w.DType() != tensor.BF16 || got != 2*int64(lay.Units[1].Size) {
				t.Errorf("stage 3: unit 1 in %s, param %d bytes while fetched, want bf16 and 2·%d", w.DType(), got, lay.Units[1].Size)
			}
			s.ReleaseWeights(1)
			if got := dev.Stats().Live[device.Param]; got != 0 {
				t.Errorf("stage 3: param %d bytes after the release, want 0", got)
			}
		}
		s.Free()
		worlds[0].Close()
	}
}
