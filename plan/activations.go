package plan

// actSizes are the activation bytes of one micro-batch on one device.
type actSizes struct {
	layer   float64 // kept by one transformer layer until its backward
	embed   float64 // kept by the input embedding (first stage)
	head    float64 // kept by the final norm, output layer and loss (last stage)
	working float64 // transient peak while one layer is recomputed
	// perStash is kept once per micro-batch in flight by a stage with
	// layers, whatever their number: the Trellis engine's shared
	// recomputation buffers (engineActivations).
	perStash float64
	chunk    float64 // kept once per model chunk a micro-batch runs through (the engine's stage output and token ids)
}

// layerTokenBytes derives, from first principles, the bytes one token of one
// transformer layer keeps for the backward pass on one of t tensor ranks
// (e = bytes per activation element, masks 1 byte, s = keys per query):
//
//	replicated across tp (split by tp under sequence parallelism):
//	  norm1 input h·e, QKV input h·e, norm2 input h·e, MLP input h·e
//	  GPT's two residual dropout masks 2·h
//	split across tp:
//	  q, k, v (a + 2·kv)·d·e and the attention output a·d·e (out-proj input)
//	  MLP: GELU input and output 2·f·e; SwiGLU gate, up and product 3·f·e
//	  flash: the softmax log-sum-exp, 4·a bytes
//	attention core, only without flash (split across tp):
//	  softmax output a·s·e; GPT adds its dropout mask a·s and output a·s·e
//
// For GPT (f = 4h, kv = a, e = 2) this is Korthikanti et al. 2022's
// sbh(10 + 24/t + 5as/(ht)) per layer, 34·sbh/t with sequence parallelism,
// and selective recomputation drops the attention-core term.
//
// Under fp8 the inputs of the four GEMMs (QKV input, attention output, MLP
// input, activation output) are kept as the fp8 copies the GEMMs made
// (Transformer Engine saves those for dW), one byte each.
type layerTokenBytes struct {
	repl, split, core float64
}

func (j Job) layerToken(p Plan) layerTokenBytes {
	m := j.Model
	h, f, d := float64(m.Hidden), float64(m.FFN), float64(m.HD())
	a, kv, t := float64(m.Heads), float64(m.KVHeads), float64(p.TP)
	e := actBytes(p.Precision)
	eg := e // GEMM inputs
	if p.Precision == FP8 {
		eg = 1
	}
	var x layerTokenBytes
	x.repl = 2*h*e + 2*h*eg
	if m.Dropout {
		x.repl += 2 * h
	}
	act := f * e // GELU input; SwiGLU gate and up
	if m.gated() {
		act = 2 * f * e
	}
	x.split = ((a+2*kv)*d*e + a*d*eg + act + f*eg) / t
	if p.Flash {
		x.split += 4 * a / t
	} else {
		perScore := e
		if m.Dropout {
			perScore += 1 + e
		}
		x.core = a / t * float64(j.Seq) * perScore
	}
	if p.SP {
		x.repl /= t
	}
	return x
}

// activations applies the recomputation policy to layerToken and adds the
// embedding and output-layer terms:
//
//	none       keep repl + split + core per token
//	selective  keep repl + split; the core is recomputed in the backward
//	full       keep the layer input h·e (split by tp under sequence
//	           parallelism); while one layer is recomputed its full
//	           activations exist once (the working term)
//	embedding  GPT's embedding dropout mask h bytes per token
//	output     the final norm's input and the output layer's input, h·e each,
//	           and the fp32 softmax of the vocab-parallel loss, 4·V/t
func (j Job) activations(p Plan) actSizes {
	if j.Cluster.EngineStash && j.engineRuns(p) {
		return j.engineActivations(p)
	}
	x := j.layerToken(p)
	T := j.tokens(p)
	h := float64(j.Model.Hidden)
	seqSplit := 1.0
	if p.SP {
		seqSplit = float64(p.TP)
	}
	var s actSizes
	switch p.Recompute {
	case RecomputeFull:
		s.layer = T * h * actBytes(p.Precision) / seqSplit
		s.working = T * (x.repl + x.split + x.core)
	case RecomputeSelective:
		s.layer = T * (x.repl + x.split)
		s.working = T * x.core
	default:
		s.layer = T * (x.repl + x.split + x.core)
	}
	if j.Model.Dropout {
		s.embed = T * h / seqSplit
	}
	s.head = T * (2*h*actBytes(p.Precision)/seqSplit + 4*float64(j.Model.Vocab)/float64(p.TP))
	return s
}
