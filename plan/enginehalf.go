package plan

// engineHalfCompute is what a 16-bit plan costs on the Trellis engine
// beyond its 16-bit GEMMs (engineBF16: a CPU host running the engine's
// model in bf16 or fp16). The engine runs only the linear layers' GEMMs
// in 16 bits (ops.MatMulBF16/F16: 16-bit operands, fp32 accumulation);
// LayerNorm, GELU, residuals, the attention core and the loss stay fp32
// (e = 4 bytes per element, at the fp32 peak), and the 16-bit operands
// are made by conversion passes (model/block16.go), per token of a
// micro-batch on one of t tensor ranks (r = 1/t under sequence
// parallelism, else 1), with an encode reading 4 and writing 2 bytes per
// element and a round (encode, then decode back) 12:
//
//	forward   encode ln1, atty, ln2 (h·r, h/t, h·r), fcg (4h/t);
//	          round qkv (3h/t), fc (4h/t):           12h·r + 114h/t bytes
//	backward  encode each linear's output gradient (h·r, 4h/t, h·r,
//	          3h/t); decode fc, qkv, atty (8h/t):      12h·r + 90h/t bytes
//
// in 8 and 7 kernels. A Llama's (q = a·d query and k = kv·d key/value
// columns, f its SwiGLU width, W = q + 2k the qkv width):
//
//	forward   encode ln1, atty, ln2, act (h·r, q/t, h·r, f/t);
//	          round qkv (W/t), gate|up (2f/t):      12h·r + (6q + 12W + 30f)/t bytes
//	backward  encode each GEMM's output gradient (h·r, 2f/t, h·r, W/t);
//	          decode gate|up, qkv, atty:            12h·r + (6q + 12W + 24f)/t bytes
//
// Weights: the state strategy hands the layers
// 16-bit weights (parallel/zero): stages 0-2 round their masters once per
// step, after the update; ZeRO-3 gathers fp32 chunks and rounds a unit on
// every fetch, in the forward and again in the backward of every
// micro-batch: 6 bytes per parameter each time (engineHalfFetch).
func (j Job) engineHalfCompute(p Plan, fp32 kernels) passTime {
	fp32 = fp32.converting()
	h, t := float64(j.Model.Hidden), float64(p.TP)
	r := 1.0
	if p.SP {
		r = 1 / t
	}
	T := j.tokens(p)
	if m := j.Model; m.Family == Llama {
		q, f := float64(m.Heads*m.HD()), float64(m.FFN)
		W := q + 2*float64(m.KVHeads*m.HD())
		return passTime{
			fwd: fp32.stream(T*(12*h*r+(6*q+12*W+30*f)/t), 8),
			bwd: fp32.stream(T*(12*h*r+(6*q+12*W+24*f)/t), 7),
		}
	}
	return passTime{
		fwd: fp32.stream(T*(12*h*r+114*h/t), 8),
		bwd: fp32.stream(T*(12*h*r+90*h/t), 7),
	}
}

// engineHalfFetch is the per-micro-batch weight conversion of
// engineHalfCompute for P parameters under ZeRO-3 (the other stages round
// their weights once per step).
func (j Job) engineHalfFetch(p Plan, fp32 kernels, P float64) passTime {
	if p.ZeRO != 3 {
		return passTime{}
	}
	fp32 = fp32.converting()
	return passTime{fwd: fp32.stream(6*P, 1), bwd: fp32.stream(6*P, 1)}
}

// converting is k with its memory-bound passes at the conversion passes'
// rate, MemBW·ConvEff (Accel.ConvEff; unchanged where it is 0).
func (k kernels) converting() kernels {
	if c := k.a.ConvEff; c > 0 {
		k.mem = k.a.MemBW * c
	}
	return k
}
