package model

import (
	"encoding/binary"
	"math"
	"testing"

	"trellis/device"
	"trellis/ops"
	"trellis/safetensors"
)

// relErr is the fixture's error measure: max_i |got_i − want_i| / max_i |want_i|,
// the worst error relative to the tensor's largest magnitude.
func relErr(got, want []float32) float64 {
	var d, m float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = max(m, math.Abs(float64(want[i])))
	}
	if m == 0 {
		return d
	}
	return d / m
}

func fixtureInt32(t *testing.T, f *safetensors.File, name string) []int32 {
	t.Helper()
	info, err := f.Info(name)
	if err != nil || info.DType != "I32" {
		t.Fatalf("fixture tensor %s: %v (dtype %q)", name, err, info.DType)
	}
	b, _ := f.Bytes(name)
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func fixtureFloat32(t *testing.T, f *safetensors.File, name string) []float32 {
	t.Helper()
	v, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMatchesPyTorch runs the model of testdata/gen_fixture.py on its
// weights and batch and requires loss, logits and every parameter gradient
// to match PyTorch's float64 results within a relative error (relErr) of
// 1e-4.
func TestMatchesPyTorch(t *testing.T) {
	f, err := safetensors.ReadFile("testdata/gpt_fixture.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Layers: 2, Hidden: 32, Heads: 4, SeqLen: 16, Vocab: 64}
	const B = 2
	for _, threads := range []int{1, 2} {
		k, err := ops.New(ops.Config{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		dev := device.New(device.Config{})
		m, err := New(Options{Model: cfg, Kernels: k, Device: dev, MicroBatch: B})
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewFlatParams(cfg, dev)
		if err != nil {
			t.Fatal(err)
		}
		s, err := m.NewStash()
		if err != nil {
			t.Fatal(err)
		}
		lay := m.Layout()
		for _, u := range lay.Units {
			for _, tn := range u.Tensors {
				copy(p.W[tn.Offset:tn.Offset+tn.Size], fixtureFloat32(t, f, tn.Name))
			}
		}
		batch := Batch{Inputs: fixtureInt32(t, f, "inputs"), Targets: fixtureInt32(t, f, "targets")}
		loss, err := m.Forward(p, s, batch)
		if err != nil {
			t.Fatal(err)
		}
		want := fixtureFloat32(t, f, "loss")[0]
		if e := math.Abs(float64(loss-want)) / float64(want); e > 1e-4 {
			t.Errorf("threads=%d: loss %v, PyTorch %v (relative error %.3g)", threads, loss, want, e)
		}
		// The saved probabilities against softmax(PyTorch logits).
		logits := fixtureFloat32(t, f, "logits")
		ops.SoftmaxForward(k, logits, logits, B*cfg.SeqLen, cfg.Vocab)
		if e := relErr(s.head.probs, logits); e > 1e-4 {
			t.Errorf("threads=%d: probabilities: relative error %.3g", threads, e)
		}
		if err := m.Backward(p, s, 1); err != nil {
			t.Fatal(err)
		}
		var worst float64
		for _, u := range lay.Units {
			for _, tn := range u.Tensors {
				e := relErr(p.G[tn.Offset:tn.Offset+tn.Size], fixtureFloat32(t, f, "grad."+tn.Name))
				worst = max(worst, e)
				if e > 1e-4 {
					t.Errorf("threads=%d: gradient of %s: relative error %.3g > 1e-4", threads, tn.Name, e)
				}
			}
		}
		t.Logf("threads=%d: loss %.6f (PyTorch %.6f), worst gradient error %.3g", threads, loss, want, worst)
	}
}
