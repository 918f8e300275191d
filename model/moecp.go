package model

import "trellis/comm"

// Mixture of experts under context parallelism: a micro-batch's B·T
// tokens lie on the cp group's ranks, n = B·T/cp each (cpSplit: two
// chunks of every sequence). Each rank routes its own tokens with the
// replicated router, but an expert's capacity and the aux loss are the
// micro-batch's, as on one device:
//
//   - capacity: the group's choices (n·k each) are gathered, and every
//     rank walks the micro-batch in one device's GShard priority — every
//     token's first choice in token order (b, position), then every
//     second choice, … — counting each expert's kept assignments against
//     cap = Capacity(B·T); it marks which of its own are dropped. Every
//     rank reaches the same verdicts, so the same assignments are dropped
//     as on one device.
//   - aux loss: f_e counts the micro-batch's loads (the walk's), P_e sums
//     every rank's scores (an all-reduce of E values), over N = B·T; the
//     gradient α·E·f_e/N of each rank's tokens is then one device's.
//
// The experts' and the router's weight gradients are summed over the
// group with the rest of the rank's gradients (the cp axis is part of
// the reduction group).

// owner is the rank of the group and its local row that hold position
// pos of a sequence.
func (p cpSplit) owner(pos int) (rank, row int) {
	ch, off := pos/p.c, pos%p.c
	switch {
	case p.contiguous:
		return ch / 2, (ch%2)*p.c + off
	case ch < p.n:
		return ch, off
	default:
		return 2*p.n - 1 - ch, p.c + off
	}
}

// cpRoute decides, for the rank's n tokens whose choices r holds (choose),
// which assignments the micro-batch's capacity drops (r.rows[i] = −1, else
// 0, for fill with pre) and sets r.aload, r.an to the micro-batch's loads
// and tokens.
func (l moeLayer) cpRoute(m *GPT, r *routing, n int) error {
	K, cp, sc := l.K, m.d.cp, &m.w.moe
	src, all := sc.cpSel[:n*K], sc.cpSel[n*K:(cp+1)*n*K]
	for i, e := range r.experts[:n*K] {
		src[i] = float32(e) // exact: e < E ≤ 2^24
	}
	if err := comm.AllGather(m.cp, comm.F32(all), comm.F32(src)); err != nil {
		return err
	}
	T, Tl, me := m.cfg.SeqLen, m.T, m.cp.Rank()
	B := n / Tl
	cap := l.cfg.Capacity(B * T)
	kept := sc.cpFill
	clear(kept)
	clear(r.aload)
	for j := 0; j < K; j++ {
		for g := 0; g < B*T; g++ {
			b, pos := g/T, g%T
			q, row := m.split.owner(pos)
			i := (b*Tl+row)*K + j
			e := int32(all[q*n*K+i])
			r.aload[e]++
			drop := cap > 0 && int(kept[e]) >= cap
			if !drop {
				kept[e]++
			}
			if q == me {
				r.rows[i] = 0
				if drop {
					r.rows[i] = -1
				}
			}
		}
	}
	r.an = B * T
	return nil
}

// aux is the layer's aux loss for a counted forward (0 without one): under
// context parallelism over the micro-batch, P's sums all-reduced over
// the group (in fp32; the value is reported, its gradient needs f alone).
func (l moeLayer) aux(m *GPT, a moeActs, r routing, n int) (float64, error) {
	if l.alpha <= 0 {
		return 0, nil
	}
	P := m.w.moe.auxP
	auxSums(P, a.probs, n, l.E, l.sigmoid)
	if m.d.cp > 1 {
		buf := m.w.moe.cpP
		for e, v := range P {
			buf[e] = float32(v)
		}
		if err := comm.AllReduce(m.cp, comm.F32(buf), comm.Sum); err != nil {
			return 0, err
		}
		for e, v := range buf {
			P[e] = float64(v)
		}
	}
	return auxLoss(r, P, l.K, l.alpha), nil
}
