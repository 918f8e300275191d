package zero

import (
	"fmt"

	"trellis/comm"
	"trellis/device"
	"trellis/ops"
	"trellis/tensor"
)

// Mixed precision under stages 1 and 2 (Config.Half = bf16 or fp16):
// Megatron's distributed optimizer. The fp32 master weights are sharded
// with the moments — each rank keeps those of its own chunks, which its
// AdamW updates — and every weight is held as its 16-bit rounding r(w),
// 2 bytes, in full: after each update a rank rounds its chunks
// (ops.EncodeBF16/F16) and the 16-bit chunks are all-gathered in place
// (the bits travel as a bf16 payload; an all-gather does no arithmetic).
// Per rank, with P the padded parameter count and N ranks:
//
//	param  2P (the 16-bit weights)         optim  4P/N (master) + 8·share (moments)
//	grad   4P (stage 1), 4P/N (stage 2)    workspace  4u (one unit widened, below)
//
// Weights(u) widens unit u's 16-bit weights exactly into an fp32 buffer
// (tag workspace, u values) held until ReleaseWeights(u): the model's
// passes under bf16/fp16 round every weight they read (model/weights16.go),
// and r(w) rounds to itself, so a run computes on the same bits as the
// unsharded one, whose runner rounds the fp32 master weights itself.

// half says whether the weights are held in 16-bit with sharded masters.
func (s *Strategy) half() bool { return s.cfg.Half != tensor.F32 && s.cfg.Stage < 3 }

// allocHalf allocates the 16-bit weights (tag param) and points each
// bucket's full16 at its part.
func (s *Strategy) allocHalf() error {
	var err error
	if s.wh, err = s.cfg.Device.AllocOf(device.Param, s.cfg.Half, s.bl.Padded); err != nil {
		return fmt.Errorf("zero: %s weights: %w", s.cfg.Half, err)
	}
	for i := range s.bk {
		b := &s.bk[i]
		b.full16 = s.wh.Bits[b.POffset : b.POffset+b.Padded]
	}
	s.views = map[int]*view{}
	return nil
}

// view is a unit's widened 16-bit weights while fetched.
type view struct {
	buf  *device.Buffer
	refs int
}

// publish starts the all-gather of the updated weights of stages 1 and 2
// (waited for at each bucket's next use): fp32 chunks, or with Half their
// 16-bit roundings.
func (s *Strategy) publish() {
	if s.cfg.Stage == 3 {
		return
	}
	for i := range s.bk {
		b := &s.bk[i]
		if !s.half() {
			b.ag = s.track.Watch(s.cfg.Params.AllGather(comm.F32(b.full), comm.F32(b.p)), nil)
			continue
		}
		c := b.Chunk()
		own := b.full16[s.r*c : (s.r+1)*c]
		if s.cfg.Half == tensor.F16 {
			ops.EncodeF16(s.cfg.Kernels, tensor.F16View(own), b.p)
		} else {
			ops.EncodeBF16(s.cfg.Kernels, tensor.BF16View(own), b.p)
		}
		b.ag = s.track.Watch(s.cfg.Params.AllGather(comm.BF16(tensor.BF16View(b.full16)), comm.BF16(tensor.BF16View(own))), nil)
	}
}

// halfWeights is Weights(u) with Half: unit u's 16-bit weights widened
// into its view, allocated (and filled) at the first of nested fetches.
func (s *Strategy) halfWeights(u int, b *bucket, pos, n int) ([]float32, error) {
	if v, ok := s.views[u]; ok {
		v.refs++
		return v.buf.Data, nil
	}
	buf, err := s.cfg.Device.Alloc(device.Workspace, n)
	if err != nil {
		return nil, fmt.Errorf("zero: widening the %s weights of unit %d: %w", s.cfg.Half, u, err)
	}
	src := b.full16[pos : pos+n]
	if s.cfg.Half == tensor.F16 {
		ops.DecodeF16(s.cfg.Kernels, buf.Data, tensor.F16View(src))
	} else {
		ops.DecodeBF16(s.cfg.Kernels, buf.Data, tensor.BF16View(src))
	}
	s.views[u] = &view{buf: buf, refs: 1}
	return buf.Data, nil
}

// releaseHalf ends a fetch of unit u's widened weights.
func (s *Strategy) releaseHalf(u int) {
	v, ok := s.views[u]
	if !ok {
		return
	}
	if v.refs--; v.refs == 0 {
		v.buf.Free()
		delete(s.views, u)
	}
}

// freeHalf returns the 16-bit weights and any view still held.
func (s *Strategy) freeHalf() {
	for u, v := range s.views {
		v.buf.Free()
		delete(s.views, u)
	}
	s.wh.Free()
}
