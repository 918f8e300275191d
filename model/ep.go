package model

import "trellis/tensor"

// Expert parallelism (GShard, Lepikhin et al. 2020): the ep ranks of an
// expert-parallel group each hold E/ep of every MoE layer's experts (rank
// q experts [q·E/ep, (q+1)·E/ep)) and route their own tokens over all E.
// A rank's dispatched rows are grouped by expert, so the rows for rank q's
// experts are one segment: the forward's dispatch is one all-to-all-v of
// those segments (after an all-to-all of the per-expert row counts), the
// experts run over the rows they received — reordered from the group's
// order (source rank, then expert) into expert order, one grouped GEMM a
// projection over the local experts — and the outputs go back by the
// inverse all-to-all-v, so the combine and everything after it are the
// single device's. The backward mirrors it: the rows' output gradients
// out, the experts' backward, their input gradients back. What a rank
// receives is bounded before the step (arch's ExpertRows): under capacity
// routing cap rows an expert from each of the ep ranks, E·cap in all;
// dropless, every token of the group routed to this rank's experts,
// ep·n·min(k, E/ep) rows; so every buffer is sized before the step; an expert's weight gradient sums its rows from every
// rank of the group (the data-parallel mean, that sum averaged over the
// expert-data-parallel group and scaled by 1/ep, is the strategy's:
// train's epState).

// epExchange exchanges r's per-expert row counts with the group and lays
// out the received rows: it returns the rows sent to and received from
// each rank and the rows received in all, and sets the local experts'
// offsets (sc.local: expert j's rows [local[j], local[j+1]) in expert
// order) and every received row's place in expert order (sc.perm).
func (l moeLayer) epExchange(m *GPT, r routing) (send, recv []int, rx int, err error) {
	ep, E, sc := m.d.ep, l.E, &m.w.moe
	El := E / ep
	out, in := sc.counts[:E], sc.counts[E:2*E]
	for e := range E {
		lo, hi := r.rowsOf(e)
		out[e] = float32(hi - lo)
	}
	if err := m.ep.ExchangeCounts(in, out); err != nil {
		return nil, nil, 0, err
	}
	send, recv = make([]int, ep), make([]int, ep)
	clear(sc.local)
	for q := range ep {
		for j := range El {
			send[q] += int(out[q*El+j])
			recv[q] += int(in[q*El+j])
			sc.local[j+1] += int32(in[q*El+j])
		}
	}
	for j := range El {
		sc.local[j+1] += sc.local[j]
	}
	fill := make([]int32, El) // rows of expert j placed so far
	p := 0
	for q := range ep {
		for j := range El {
			for range int(in[q*El+j]) {
				sc.perm[p] = sc.local[j] + fill[j]
				fill[j]++
				p++
			}
		}
	}
	return send, recv, p, nil
}

// elems scales row counts to element counts of rows of width C.
func elems(rows []int, C int) []int {
	out := make([]int, len(rows))
	for i, r := range rows {
		out[i] = r * C
	}
	return out
}

// forwardEP dispatches the rank's tokens z to the ranks of their experts,
// runs the local experts over what it received and brings the outputs of
// its own tokens back into a.y (rows as r orders them); it returns the
// rows the rank's experts received.
func (l moeLayer) forwardEP(m *GPT, a moeActs, z tensor.Buf, w moeWeights, r routing, n int) (int, error) {
	C, sc := l.C, &m.w.moe
	send, recv, rx, err := l.epExchange(m, r)
	if err != nil {
		return 0, err
	}
	R := r.kept()
	m.k.MoEDispatch(sc.sendX, z, r.rows, n, l.K, C)
	if err := m.ep.AllToAllV(sc.recvX.Head(rx*C), sc.sendX.Head(R*C), elems(send, C), elems(recv, C)); err != nil {
		return 0, err
	}
	m.k.MoEDispatch(a.x, sc.recvX, sc.perm, rx, 1, C) // the group's order into expert order
	local := routing{offs: sc.local}
	l.runExperts(m, a, w, local, sc.exp)
	grp := sc.grp[:rx*C]
	clear(grp)
	m.k.MoECombine(grp, sc.exp, nil, sc.perm, rx, 1, C) // back into the group's order
	return rx, m.ep.AllToAllV(tensor.F32s(a.y[:R*C]), tensor.F32s(grp), elems(recv, C), elems(send, C))
}

// backwardEP sends the output gradients of the rank's rows (sc.rows, as r
// orders them) to their experts' ranks, runs the local experts' backward
// and brings the input gradients of its own rows back into sc.rows.
func (l moeLayer) backwardEP(m *GPT, a moeActs, w moeWeights, g moeGrads, r routing) error {
	C, sc := l.C, &m.w.moe
	send, recv, rx, err := l.epExchange(m, r)
	if err != nil {
		return err
	}
	R := r.kept()
	grp := sc.grp[:rx*C]
	if err := m.ep.AllToAllV(tensor.F32s(grp), tensor.F32s(sc.rows[:R*C]), elems(send, C), elems(recv, C)); err != nil {
		return err
	}
	m.k.MoEDispatch(tensor.F32s(sc.exp), tensor.F32s(grp), sc.perm, rx, 1, C)
	l.expertsBackward(m, a, w, g, routing{offs: sc.local}, sc.exp)
	clear(grp)
	m.k.MoECombine(grp, sc.exp, nil, sc.perm, rx, 1, C)
	return m.ep.AllToAllV(tensor.F32s(sc.rows[:R*C]), tensor.F32s(grp), elems(recv, C), elems(send, C))
}
