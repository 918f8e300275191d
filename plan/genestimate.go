package plan

import "math"

// generalFLOPs counts one step's floating-point operations over all
// devices for a general model, layer by layer:
//
//	F_fwd/token = Σ_layers (2·P_active + attention) + 2·h·V + MTP
//
// with P_active a layer's matrix parameters one token uses (attention, the
// dense MLP or the router, the shared experts and k routed experts) and
// attention 4·s·a·d over the full s×s as the dense path counts it (MLA:
// 2·s·a·(d_n + d_r + d_v); a sliding-window layer: its window w in place of
// s); each MTP module adds its 2h → h projection, its layer and the output
// layer. model = 3 · tokens · F_fwd; hardware adds the recomputed forwards
// (torchtitan's per-op policy: the routed experts' GEMMs and every other
// matrix product, half the rest).
func (j Job) generalFLOPs(p Plan) (model, hw float64) {
	m := j.Model
	if !m.general() {
		return j.FLOPs(p)
	}
	h, s := float64(m.Hidden), float64(j.Seq)
	layerF := func(i int) (mat, attn, routed float64) {
		a := float64(m.Heads)
		keys := s
		if m.windowLayer(i) {
			keys = math.Min(s, float64(m.Window))
		}
		if m.mla() {
			x := m.latent()
			qk, qr, kvr := float64(x.QKNope+x.QKRope), float64(x.QRank), float64(x.KVRank)
			mat = h*(kvr+float64(x.QKRope)) + kvr*a*float64(x.QKNope+x.V) + a*float64(x.V)*h
			if x.QRank > 0 {
				mat += h*qr + qr*a*qk
			} else {
				mat += h * a * qk
			}
			attn = 2 * keys * a * (qk + float64(x.V))
		} else {
			d := float64(m.HD())
			mat = 2*h*a*d + 2*h*float64(m.KVHeads)*d
			attn = 4 * keys * a * d
		}
		gate := 2.0
		if m.gated() {
			gate = 3
		}
		if m.moeLayer(i) {
			e := m.experts()
			routed = float64(e.TopK) * 3 * h * float64(e.FFN)
			mat += 3*h*float64(e.SharedFFN) + routed + float64(e.Experts)*h
		} else {
			mat += gate * h * float64(m.FFN)
		}
		return mat, attn, routed
	}
	var fwd, rc, rcAttn, rcOp float64
	for i := 0; i < m.Layers; i++ {
		mat, attn, routed := layerF(i)
		fwd += 2*mat + attn
		rc += 2*mat + attn
		rcAttn += attn
		rcOp += 2*routed + (mat - routed) // torchtitan's per-op policy: the experts, every other GEMM
	}
	fwd += 2 * h * float64(m.Vocab)
	if m.MTP > 0 {
		mat, attn, _ := layerF(m.Layers - 1)
		fwd += float64(m.MTP) * (2*2*h*h + 2*mat + attn + 2*h*float64(m.Vocab))
	}
	tokens := float64(j.GlobalBatch) * s
	model = 3 * tokens * fwd
	hw = model
	switch {
	case p.Recompute == RecomputeFull:
		hw += tokens * rc
	case p.Recompute == RecomputeSelective && j.Cluster.Software.OpSAC:
		hw += tokens * rcOp
	case p.Recompute == RecomputeSelective && !p.Flash:
		hw += tokens * rcAttn
	}
	return model, hw
}

// generalEstimate is estimate for the general path.
func (j Job) generalEstimate(p Plan, pl placement) Estimate {
	lay := j.newLayout(p)
	g := j.newGeneralCosts(p, pl, lay)
	return j.generalFinish(p, pl, &g, j.generalMemory(p, lay))
}

// generalFinish completes an estimate of the general path whose memory
// and costs are known.
func (j Job) generalFinish(p Plan, pl placement, g *generalCosts, mem Memory) Estimate {
	if g.flops[0] == 0 {
		g.flops[0], g.flops[1] = j.generalFLOPs(p)
	}
	t, _ := j.generalStepTime(p, pl, g)
	e := Estimate{Plan: p, Memory: mem, Time: t}
	e.ModelFLOPs, e.HWFLOPs = g.flops[0], g.flops[1]
	n := float64(j.Devices)
	e.TFLOPsPerDevice = e.ModelFLOPs / e.Time.Step / n / tera
	e.HWTFLOPsPerDevice = e.HWFLOPs / e.Time.Step / n / tera
	peak := j.Cluster.Accel.Peak[p.Precision] / tera
	e.MFU, e.HFU = e.TFLOPsPerDevice/peak, e.HWTFLOPsPerDevice/peak
	e.TokensPerS = float64(j.GlobalBatch) * float64(j.Seq) / e.Time.Step
	return e
}
