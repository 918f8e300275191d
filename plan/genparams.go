package plan

// Parameters on one device of the general path, in two parts: dense (the
// attention, norms, dense MLPs, routers, shared experts, embedding and
// output layer; replicated over dp·cp, and sharded there by ZeRO) and
// expert (a rank's E/EP routed experts, each 1/ETP of its MLP; replicated
// over EDP, and sharded there).

// attnParamsTP is one layer's attention on one of t tensor ranks:
// column- and row-parallel matrices and the column-parallel biases split,
// the output bias, the q/k norms and MLA's down-projections and latent
// norms replicated (Megatron's MLA runs the down-projections on each
// rank's own tokens).
func (m Model) attnParamsTP(t float64) float64 {
	h, a := float64(m.Hidden), float64(m.Heads)
	if m.mla() {
		x := m.latent()
		qk, qr, kvr := float64(x.QKNope+x.QKRope), float64(x.QRank), float64(x.KVRank)
		repl := h*(kvr+float64(x.QKRope)) + kvr
		split := kvr*a*float64(x.QKNope+x.V) + a*float64(x.V)*h
		if x.QRank > 0 {
			repl += h*qr + qr
			split += qr * a * qk
		} else {
			split += h * a * qk
		}
		return repl + split/t
	}
	d, kv := float64(m.HD()), float64(m.KVHeads)
	split := 2*h*a*d + 2*h*kv*d
	repl := 0.0
	if m.AttnBias {
		split += (a + 2*kv) * d
		repl += h
	}
	if m.QKNorm {
		repl += 2 * d
	}
	if m.Sinks {
		split += a
	}
	return split/t + repl
}

// mlpParamsTP is an MLP of width f (gated: gate, up and down; GELU: up
// and down) on one of t tensor ranks, its column-parallel biases split.
func (m Model) mlpParamsTP(f int, t float64) float64 {
	h, ff := float64(m.Hidden), float64(f)
	in := 1.0
	if m.gated() {
		in = 2
	}
	n := (in + 1) * h * ff / t
	if m.MLPBias {
		n += in*ff/t + h
	}
	return n
}

// layerParamsSplit is layer i on one device: its dense part under tp = t
// and its routed experts under (ep, etp).
func (m Model) layerParamsSplit(i int, t float64, ep, etp int) (dense, expert float64) {
	dense = m.attnParamsTP(t) + 2*float64(m.normParams())
	if !m.moeLayer(i) {
		return dense + m.mlpParamsTP(m.FFN, t), 0
	}
	e := m.experts()
	h := float64(m.Hidden)
	dense += float64(e.Experts) * h // the router, replicated
	if e.RouterBias {
		dense += float64(e.Experts)
	}
	if e.SharedFFN > 0 {
		dense += m.mlpParamsTP(e.SharedFFN, t)
		if e.SharedGate {
			dense += h
		}
	}
	expert = float64(e.Experts/ep) * float64(m.expertParams()) / float64(etp)
	return dense, expert
}

// kindParams is one layer of each kind on a device: [moe] → (dense, expert).
func (j Job) kindParams(p Plan) [2][2]float64 {
	m := j.Model
	ep, etp := p.Experts()
	t := float64(p.TP)
	var out [2][2]float64
	dense := -1
	moe := -1
	for i := 0; i < m.Layers && (dense < 0 || moe < 0); i++ {
		if m.moeLayer(i) && moe < 0 {
			moe = i
		} else if !m.moeLayer(i) && dense < 0 {
			dense = i
		}
	}
	if dense >= 0 {
		out[0][0], out[0][1] = m.layerParamsSplit(dense, t, ep, etp)
	}
	if moe >= 0 {
		out[1][0], out[1][1] = m.layerParamsSplit(moe, t, ep, etp)
	}
	return out
}

// chunkParams is chunk c's parameters on a device: its layers, the
// vocab-parallel embedding (and learned positions, embedding norm) on
// chunk 0, the final norm and the output layer (a second copy of a tied
// embedding when the two chunks differ) and the MTP modules on the last.
func (j Job) chunkParams(p Plan, kp [2][2]float64, c chunkShape, chunks int) (dense, expert float64) {
	m := j.Model
	dl := float64(c.layers - c.moe)
	ml := float64(c.moe)
	dense = dl*kp[0][0] + ml*kp[1][0]
	expert = ml * kp[1][1]
	t := float64(p.TP)
	vocab := float64(m.Vocab) * float64(m.Hidden) / t
	if c.embed {
		dense += float64(m.EmbeddingParams()-int64(m.Vocab)*int64(m.Hidden)) + vocab
	}
	if c.head {
		dense += float64(m.normParams())
		if !m.Tied || chunks > 1 {
			dense += vocab
		}
		if m.MTP > 0 {
			h := float64(m.Hidden)
			last := kp[b2i(m.moeLayer(m.Layers-1))]
			dense += float64(m.MTP) * (3*float64(m.normParams()) + 2*h*h/t + last[0])
			expert += float64(m.MTP) * last[1]
		}
	}
	return dense, expert
}

// shards are the ZeRO divisors of the dense and expert parts: dp·cp and
// EDP, doubled under DualPipe, whose two copies of every parameter form a
// data-parallel group twice as large.
func (p Plan) shards() (dense, expert float64) {
	d, e := float64(p.DP*p.CP), float64(p.edp())
	if p.Schedule == DualPipe {
		d, e = 2*d, 2*e
	}
	return d, e
}

// stateBytes is the bytes per parameter of the weights, gradients and
// optimizer states (w, g, k): 2, 4 and 12 for 16-bit training (Adam's m, v
// and an fp32 master), or with Software.FP32Params 4, 4 and 8 (the fp32
// parameter is the master).
func stateBytes(p Plan, sw Software) (w, g, k float64) {
	if sw.FP32Params && p.Precision != FP32 {
		return 4, 4, 8
	}
	return weightBytes(p.Precision), gradBytes(p.Precision), optimBytes(p.Precision)
}

// generalStates fills Param, Grad and Optim for a rank's dense and expert
// parameters (w, g, k from stateBytes):
//
//	Param = w·(P_d/(N if zero=3) + P_e/(EDP if zero=3))
//	Grad  = g·(P_d/(N if zero≥2) + P_e/(EDP if zero≥2))
//	Optim = k·(P_d/(N if zero≥1) + P_e/(EDP if zero≥1))
func generalStates(mem *Memory, dense, expert float64, p Plan, sw Software) {
	w, g, k := stateBytes(p, sw)
	nd, ne := p.shards()
	part := func(stage int, bytes float64) float64 {
		if p.ZeRO >= stage {
			return bytes * (dense/nd + expert/ne)
		}
		return bytes * (dense + expert)
	}
	mem.Param, mem.Grad, mem.Optim = ceil(part(3, w)), ceil(part(2, g)), ceil(part(1, k))
}
