package model

import (
	"fmt"

	"trellis/arch"
	"trellis/device"
	"trellis/tensor"
)

// Batch is one micro-batch.
type Batch struct {
	Inputs  []int32 // (B,T) token ids in [0, V)
	Targets []int32 // (B,T) the next tokens
	Step    int64   // the optimizer step, for dropout keys
	Sample  int     // global index of the micro-batch's first sequence in the step, for dropout keys
	Eval    bool    // no dropout (validation)
}

// Stash holds the activations of one micro-batch that the backward pass
// needs (arch's declarations: the residual streams, every block's
// BlockSaved, the head's HeadSaved), allocated on the device with tag act:
// an fp32 buffer and, under a 16-bit policy, a 16-bit one for the Operand
// tensors. A pipeline keeps one per micro-batch in flight, each laid out
// for a stage's blocks.
type Stash struct {
	buf      *device.Buffer // the fp32 activations
	half     *device.Buffer // the 16-bit ones (nil in fp32)
	dev      *device.Device
	tokBytes int64

	inputs, targets []int32 // (B,T)
	step            int64
	sample          int
	eval            bool
	b, t            int // the shape of the current pass: (B,T) in training, (1,n) in inference
	// lossW is the backward's loss weight dloss (HeadBackward's, or
	// SetLossWeight's on a pipeline stage without the head): the MoE
	// layers' aux losses take it too.
	lossW float32

	res    [][]float32 // (L+1) × (n,C): res[l] is block l's input, res[L] the last block's output
	blocks []blockActs // (L)
	head   headActs
}

// carver hands out consecutive tensors of a stash's fp32 and 16-bit
// buffers in arch's declaration order.
type carver struct {
	f    []float32
	h    []uint16
	half tensor.DType // the Operand dtype, F32 when the stash has no 16-bit part
}

func (c *carver) f32(n int) []float32 {
	x := c.f[:n:n]
	c.f = c.f[n:]
	return x
}

// saved carves the declared tensors, returning them by name.
func (c *carver) saved(ss []arch.Saved) map[string]tensor.Buf {
	out := make(map[string]tensor.Buf, len(ss))
	for _, s := range ss {
		n := int(s.Elems)
		if s.Class == arch.Operand && c.half != tensor.F32 {
			out[s.Name] = tensor.Halves(c.half, c.h[:n:n])
			c.h = c.h[n:]
			continue
		}
		out[s.Name] = tensor.F32s(c.f32(n))
	}
	return out
}

// get is a carved tensor by name (a missing name is a programming error:
// the passes and arch's declarations disagree).
func get(t map[string]tensor.Buf, name string) tensor.Buf {
	b, ok := t[name]
	if !ok {
		panic("model: arch declares no saved tensor " + name)
	}
	return b
}

// declared are the block's saved tensors arch declares, less the shared
// probabilities buffer when shared (selective recomputation).
func (m *GPT) declared(shared bool, l int) []arch.Saved {
	var decl []arch.Saved
	for _, s := range m.cfg.BlockSavedAt(m.d.arch(m.B, m.T), l) {
		if s.Role == arch.Probs && shared {
			continue
		}
		decl = append(decl, s)
	}
	return decl
}

// carveBlock carves one block's activations; probs, when not nil, is the
// attention-core buffer the stash's blocks share (selective recomputation).
func (m *GPT) carveBlock(cv *carver, probs []float32, l int) blockActs {
	if m.d.llama {
		return m.carveLlama(cv, probs, l)
	}
	t := cv.saved(m.declared(probs != nil, l))
	att := probs
	if att == nil {
		name := "attn.probs"
		if m.d.flash {
			name = "attn.lse"
		}
		att = get(t, name).F32()
	}
	return blockActs{
		ln1:  normActs{out: get(t, "ln_1.out"), mean: get(t, "ln_1.mean").F32(), rstd: get(t, "ln_1.rstd").F32()},
		attn: attnActs{qkv: get(t, "attn.qkv"), out: get(t, "attn.out"), att: att},
		res2: get(t, "res2").F32(),
		ln2:  normActs{out: get(t, "ln_2.out"), mean: get(t, "ln_2.mean").F32(), rstd: get(t, "ln_2.rstd").F32()},
		mlp:  mlpActs{fc: get(t, "mlp.fc"), fcg: get(t, "mlp.fcg")},
	}
}

// carveHead carves the head's activations.
func (m *GPT) carveHead(cv *carver) headActs {
	t := cv.saved(m.cfg.HeadSaved(m.d.arch(m.B, m.T)))
	if m.d.llama {
		return headActs{lnf: normActs{out: get(t, "norm.out"), rstd: get(t, "norm.rstd").F32()},
			probs: get(t, "probs").F32(), losses: get(t, "losses").F32()}
	}
	return headActs{
		lnf:   normActs{out: get(t, "ln_f.out"), mean: get(t, "ln_f.mean").F32(), rstd: get(t, "ln_f.rstd").F32()},
		probs: get(t, "probs").F32(), losses: get(t, "losses").F32(),
	}
}

// carveBlocks points blocks [lo, hi) at activations carved from cv, shared
// as arch.Config.BlocksElems counts them: one set for all under full
// recomputation, one probabilities buffer under selective.
func (m *GPT) carveBlocks(s *Stash, lo, hi int, cv *carver) {
	if hi <= lo {
		return
	}
	var probs []float32
	if m.d.sharesProbs() {
		for _, d := range m.cfg.BlockSaved(m.d.arch(m.B, m.T)) {
			if d.Role == arch.Probs {
				probs = cv.f32(int(d.Elems))
			}
		}
	}
	first := map[bool]int{} // full recomputation: the first block of each kind (dense, MoE)
	for l := lo; l < hi; l++ {
		if f, ok := first[m.cfg.MoELayer(l)]; ok && m.d.rc == RecomputeFull {
			s.blocks[l] = s.blocks[f]
			continue
		}
		first[m.cfg.MoELayer(l)] = l
		s.blocks[l] = m.carveBlock(cv, probs, l)
	}
}

// stageElems is the stash of a stage of blocks [lo, hi) (with the head or
// not): arch's StageStashAt for the runner's part and policy.
func (m *GPT) stageElems(lo, hi int, head bool) (f32, half int) {
	e := m.cfg.StageStashAt(m.d.arch(m.B, m.T), lo, hi, head, m.d.half)
	f32, half, ok := e.Ints()
	if !ok {
		panic("model: a stash larger than 2^53 elements") // New's caller checked the job's memory
	}
	return f32, half
}

// StashBytes is the size of one whole-model stash: its fp32 and 16-bit
// activations and its two (B,T) int32 token arrays.
func (m *GPT) StashBytes() int64 { return m.StageStashBytes(0, m.cfg.Layers, true) }

// NewStash allocates a whole-model stash for one micro-batch (tag act):
// the stage [0, L) with the head.
func (m *GPT) NewStash() (*Stash, error) { return m.NewStageStash(0, m.cfg.Layers, true) }

// allocStash allocates a stash of f fp32 and h 16-bit activations and its
// token arrays (tag act); what names it in errors.
func (m *GPT) allocStash(what string, f, h int) (*Stash, error) {
	BT := m.B * m.T
	tokBytes := 2 * int64(BT) * 4
	if err := m.dev.Reserve(device.Act, tokBytes); err != nil {
		return nil, fmt.Errorf("model: stash tokens: %w", err)
	}
	buf, err := m.dev.Alloc(device.Act, f)
	if err != nil {
		m.dev.Release(device.Act, tokBytes)
		return nil, fmt.Errorf("model: %s: %w", what, err)
	}
	s := &Stash{buf: buf, dev: m.dev, tokBytes: tokBytes, inputs: make([]int32, BT), targets: make([]int32, BT)}
	if h > 0 {
		if s.half, err = m.dev.AllocOf(device.Act, m.pol.Stash, h); err != nil {
			s.Free()
			return nil, fmt.Errorf("model: %s (%s): %w", what, m.pol.Stash, err)
		}
	}
	return s, nil
}

// Free returns the stash's memory to the device. Freeing twice is a no-op.
func (s *Stash) Free() {
	if s.buf == nil {
		return
	}
	s.buf.Free()
	s.half.Free()
	s.dev.Release(device.Act, s.tokBytes)
	s.buf, s.half = nil, nil
}

// Residual is residual stream l, (B,T,C) (with sequence parallelism the
// rank's B·T/t tokens): the input of block l, or for l = L the output of
// the last block. A pipeline stage writes its received activations into
// Residual(first block) before BlockForward, and sends Residual(last
// block + 1) after.
func (s *Stash) Residual(l int) []float32 { return s.res[l] }

// SetLossWeight records the loss weight dloss of the backward pass to
// come (HeadBackward records its own): a pipeline stage without the head
// calls it before its blocks' backward, whose MoE layers scale their aux
// losses' gradients by it.
func (s *Stash) SetLossWeight(dloss float32) { s.lossW = dloss }

// Losses are the per-token losses of the last forward pass, (B,T).
func (s *Stash) Losses() []float32 { return s.head.losses[:s.b*s.t] }

// Load validates a batch and records it in the stash: tokens, step and
// sample. Forward calls it; a pipeline stage without the embedding calls
// it before its first BlockForward.
func (m *GPT) Load(s *Stash, b Batch) error {
	if s.buf == nil {
		return fmt.Errorf("model: stash has been freed")
	}
	BT := m.B * m.T
	if len(b.Inputs) != BT || len(b.Targets) != BT {
		return fmt.Errorf("model: batch has %d inputs and %d targets, want micro_batch·seq_len(/cp) = %d·%d = %d",
			len(b.Inputs), len(b.Targets), m.B, m.T, BT)
	}
	if err := m.checkTokens("input", b.Inputs); err != nil {
		return err
	}
	if err := m.checkTokens("target", b.Targets); err != nil {
		return err
	}
	copy(s.inputs, b.Inputs)
	copy(s.targets, b.Targets)
	s.step, s.sample, s.eval = b.Step, b.Sample, b.Eval
	s.b, s.t = m.B, m.T
	return nil
}

func (m *GPT) checkTokens(what string, toks []int32) error {
	for i, t := range toks {
		if t < 0 || int(t) >= m.cfg.Vocab {
			return fmt.Errorf("model: %s token %d at position %d is outside the vocabulary [0, %d)", what, t, i, m.cfg.Vocab)
		}
	}
	return nil
}
