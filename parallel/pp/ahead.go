package pp

import (
	"fmt"
	"sort"
	"time"

	"trellis/comm"
	"trellis/trace"
)

// Running movable actions ahead (zb-h1's W). A stage about to block on a
// receive, whose next movable action — the earliest listed one not yet
// run — has had its backward run, waits for the message at most as long
// as its last W took (its patience); if the message is still due, it runs
// that W, and repeats while the receive is outstanding. At the action's
// own place in the list the executor then only frees what it holds (the
// block stash and the weight stash). So:
//
//   - the bits: W(mb) only accumulates the four linears' weight gradients
//     (B the biases' and LayerNorms'), and the W's run in their list order
//     whatever the timing, so every gradient element adds the same terms in
//     the same order as under the static list;
//   - the memory: every stash is taken and freed at the same places in the
//     list as before, so each rank's act peak is the static list's, which
//     Simulate counts (InFlight, Deferred) and the planner predicts;
//   - the order: Simulate proves the static list; an executed order differs
//     from it only by movable actions taken earlier, which needs no message
//     and nothing that comes after the action's backward (Replay checks
//     every executed order with WithOrder and Simulate);
//   - the time: a W run ahead delays the pass that waited by at most what
//     is left of the W when the message arrives, and saves the W at its
//     place. Without the patience (a W at every wait) the waits of a
//     steady zb-h1 pipeline, about one link latency each, would each
//     delay a forward by W minus that latency: Simulate at the measured
//     pass costs (F ≈ B ≈ 1.2 W, latency W/12) puts zb-h1's bubble at
//     0.086 instead of the static 0.059, and the benchmark measured the
//     same direction. With it a W runs ahead only where a neighbour
//     stalls for longer than a W, which is what it can absorb.

// fill runs movable actions ahead while p is outstanding past the
// patience (the last W's duration) and the next one can run; a is the
// action that needs p (the wait lane's label).
func (s *Stage) fill(p pending, a Action) error {
	ch := p.w.ch
	for s.runnable() && s.lastW > 0 {
		if s.waitUpTo(ch, comm.CrowdingOf(p.w.w), a, s.lastW) {
			return nil
		}
		if err := s.runAhead(); err != nil {
			return err
		}
	}
	return nil
}

// waitUpTo blocks until ch is closed or d has passed (the wait lane of
// the trace) and says whether ch is closed.
func (s *Stage) waitUpTo(ch <-chan struct{}, c *comm.Crowding, a Action, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	t0 := time.Now()
	mark := c.Mark()
	timer := time.NewTimer(d)
	closed := false
	select {
	case <-ch:
		closed = true
	case <-timer.C:
	}
	timer.Stop()
	end := time.Now()
	s.waited += end.Sub(t0)
	s.crowd += c.Crowded(mark, end.Sub(t0))
	if s.cfg.Trace != nil {
		s.cfg.Trace.SpanTo(trace.Wait, "wait "+a.String(), t0, end)
	}
	return closed
}

// runnable says whether the next movable action's backward has run.
func (s *Stage) runnable() bool {
	if s.next >= len(s.movable) {
		return false
	}
	a := s.movable[s.next]
	_, ok := s.wlive[[2]int{a.MB, a.Chunk}]
	return ok && a.Op == Weight
}

// runAhead runs the next movable action (runnable says it can).
func (s *Stage) runAhead() error {
	a := s.movable[s.next]
	key := [2]int{a.MB, a.Chunk}
	if err := s.weightGrads(a, key, true); err != nil {
		return fmt.Errorf("%v, run ahead: %w", a, err)
	}
	s.ahead[key] = true
	s.next++
	s.aheadN++
	return nil
}

// WeightsAhead is the number of movable actions this stage has run ahead
// of their place in the list, over all steps.
func (s *Stage) WeightsAhead() int { return s.aheadN }

// WithOrder is s with rank r's compute actions in the executed order
// compute, fixed (none movable; receives and sends placed as Build places
// them), after
// checking that the order is s's but for movable actions taken earlier:
// the same actions, the others in s's order, the movable ones in s's
// order among themselves, none later than in s.
func (s *Schedule) WithOrder(r int, compute []Action) (*Schedule, error) {
	var static []Action
	for _, a := range s.Ranks[r] {
		if a.Op.Compute() {
			static = append(static, a)
		}
	}
	if len(compute) != len(static) {
		return nil, fmt.Errorf("pp: rank %d ran %d passes, the schedule lists %d", r, len(compute), len(static))
	}
	// pos[i] is the number of fixed (non-movable) actions before action i.
	fixedBefore := func(acts []Action) (fixed, movable []Action, pos []int) {
		n := 0
		for _, a := range acts {
			if a.Movable {
				movable, pos = append(movable, a), append(pos, n)
			} else {
				fixed = append(fixed, a)
				n++
			}
		}
		return
	}
	sf, sm, sp := fixedBefore(static)
	mov := map[Action]bool{}
	for _, a := range sm {
		mov[a] = true
	}
	mark := make([]Action, len(compute)) // compute, marked as in s
	for i, a := range compute {
		a.Movable = true // the key mov has for a movable action
		mark[i] = a
		mark[i].Movable = mov[a]
	}
	cf, cm, cp := fixedBefore(mark)
	bad := func(why string) error {
		return fmt.Errorf("pp: rank %d's executed order %v: %s", r, compute, why)
	}
	if len(cf) != len(sf) || len(cm) != len(sm) {
		return nil, bad("not the schedule's passes")
	}
	for i := range sf {
		if cf[i] != sf[i] {
			return nil, bad(fmt.Sprintf("%v where the schedule has %v", cf[i], sf[i]))
		}
	}
	for i := range sm {
		switch {
		case cm[i] != sm[i]:
			return nil, bad(fmt.Sprintf("movable %v out of order (the schedule has %v)", cm[i], sm[i]))
		case cp[i] > sp[i]:
			return nil, bad(fmt.Sprintf("%v runs later than its place", cm[i]))
		}
	}
	for i := range mark {
		mark[i].Movable = false // the order is fixed now
	}
	out := &Schedule{Config: s.Config, Ranks: append([][]Action(nil), s.Ranks...)}
	out.Ranks[r] = s.withComm(r, mark)
	return out, nil
}

// executedOrder is the compute actions of spans (executor spans, "F mb3
// c0") in the order they started, each with its duration in µs.
func executedOrder(r int, spans []trace.Event) ([]Action, []int64, error) {
	evs := append([]trace.Event(nil), spans...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].TS < evs[j].TS })
	ops := map[string]Op{"F": Forward, "B": Backward, "W": Weight}
	acts, durs := make([]Action, 0, len(evs)), make([]int64, 0, len(evs))
	for _, e := range evs {
		var op string
		var mb, ch int
		if _, err := fmt.Sscanf(e.Name, "%s mb%d c%d", &op, &mb, &ch); err != nil {
			return nil, nil, fmt.Errorf("pp: span %q of rank %d is not an executor action: %w", e.Name, r, err)
		}
		o, ok := ops[op]
		if !ok {
			return nil, nil, fmt.Errorf("pp: span %q of rank %d is not F, B or W", e.Name, r)
		}
		acts, durs = append(acts, Action{Op: o, MB: mb, Chunk: ch}), append(durs, e.Dur)
	}
	return acts, durs, nil
}
