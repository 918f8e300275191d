package pp

import (
	"fmt"
	"sort"

	"trellis/trace"
)

// Running movable actions ahead (zb-h1's W). A stage about to block on a
// receive first runs the next movable action of its list — the earliest
// listed one not yet run — if that action's backward has already run, and
// repeats while the receive is still outstanding. At the action's own place
// in the list the executor then only frees what it holds (the block stash
// and the weight stash). So:
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
//     every executed order with WithOrder and Simulate).
//
// This is what zero-bubble runtimes do to absorb the passes' cost variance:
// a rank's static slack is one W where the schedule has W's to spare, and
// none on the last rank's forwards, whose activation is due exactly when
// the rank is ready at equal costs.

// done says, without blocking, whether p's transfer has completed: the
// transport's own state when its Work exposes it (comm's queued Works),
// else the watcher's.
func done(p pending) bool {
	w := p.w
	if ww, ok := w.(*watched); ok {
		if ww.done() {
			return true
		}
		w = ww.w
	}
	if d, ok := w.(interface{ Done() bool }); ok {
		return d.Done()
	}
	return false
}

// fill runs movable actions ahead while p is outstanding and the next one
// can run.
func (s *Stage) fill(p pending) error {
	for !done(p) {
		ran, err := s.runAhead()
		if err != nil || !ran {
			return err
		}
	}
	return nil
}

// runAhead runs the next movable action if its backward has run.
func (s *Stage) runAhead() (bool, error) {
	if s.next >= len(s.movable) {
		return false, nil
	}
	a := s.movable[s.next]
	key := [2]int{a.MB, a.Chunk}
	if _, ok := s.wlive[key]; !ok || a.Op != Weight {
		return false, nil
	}
	if err := s.weightGrads(a, key, true); err != nil {
		return false, fmt.Errorf("%v, run ahead: %w", a, err)
	}
	s.ahead[key] = true
	s.next++
	s.aheadN++
	return true, nil
}

// WeightsAhead is the number of movable actions this stage has run ahead
// of their place in the list, over all steps.
func (s *Stage) WeightsAhead() int { return s.aheadN }

// WithOrder is s with rank r's compute actions in the executed order
// compute (its receives and sends placed as Build places them), after
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
	mark := make([]Action, len(compute))
	for i, a := range compute {
		mark[i] = a
		mark[i].Movable = false
	}
	mov := map[Action]bool{}
	for _, a := range sm {
		b := a
		b.Movable = false
		mov[b] = true
	}
	for i := range mark {
		mark[i].Movable = mov[mark[i]]
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
