package zero

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	pt "trellis/parallel/dptest"
	"trellis/tensor"
)

// With Half (stages 1 and 2, 2 ranks, bf16 and fp16): after Init every
// unit's Weights are the 16-bit roundings of the single device's initial
// weights, widened, on both ranks; the device holds exactly Shape.Memory
// (param 2P, optim 4P/N + 8·share with MasterWeights) and a fetched unit's
// widened copy (workspace) only until its release; the shards are the fp32
// master weights, unrounded.
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
	dev := device.New(device.Config{MasterWeights: true})
	s, err := New(Config{Model: pt.Tiny, Stage: stage, Grads: g, Params: p, Device: dev, Kernels: k,
		Hyper: pt.Hyper, Decay: pt.Decay(pt.Tiny), Half: dt})
	if err != nil {
		return err
	}
	defer s.Free()
	if err := s.Init(1); err != nil {
		return err
	}
	for u, un := range lay.Units {
		w, err := s.Weights(u)
		if err != nil {
			return err
		}
		for i, x := range w {
			if want := r(ref[un.Offset+i]); x != want {
				return fmt.Errorf("unit %d element %d: %g, want the rounding %g of %g", u, i, x, want, ref[un.Offset+i])
			}
		}
		if got := dev.Stats().Live[device.Workspace]; got != 4*int64(un.Size) {
			return fmt.Errorf("unit %d fetched: workspace %d bytes, want 4·%d", u, got, un.Size)
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

// Half must be fp32, bf16 or fp16, and needs the kernels it rounds with.
func TestHalfValidate(t *testing.T) {
	worlds, err := local.New(local.Config{Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Model: pt.Tiny, Stage: 1, Grads: worlds[0], Params: worlds[0], Device: device.New(device.Config{}), Half: tensor.DType(9)}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Half=") {
		t.Errorf("Half=%v: %v", c.Half, err)
	}
	c.Half = tensor.BF16
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Kernels") {
		t.Errorf("Half=bf16 without kernels: %v", err)
	}
}
