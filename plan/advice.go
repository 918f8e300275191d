package plan

import "fmt"

// Advice says, for a search that found no plan, why and what would make a
// plan fit, one line each:
//
//   - the pinned keys exclude every plan: the rule they break (Result.Reason);
//   - otherwise the plan that needs the least memory (Result.Smallest), by
//     how much it is over the budget, and two ways out: devices with at least
//     that much memory, or the fewest devices (the job's count times 2, 4, …,
//     64, same pinned keys) at which some plan fits, with that plan.
//
// It returns nil when r holds a plan.
func (j Job) Advice(r Result, o Options) []string {
	if len(r.Plans) > 0 {
		return nil
	}
	if r.Reason != "" {
		return []string{r.Reason, "change or drop the pinned keys (--fix) that break it"}
	}
	sm := r.Smallest
	if sm.Memory.Total == 0 {
		if why := engineRefusedAdvice(r); why != "" {
			return []string{why, "pin a plan the engine runs (docs/ARCHITECTURE.md lists them), or plan on a GPU preset"}
		}
		return []string{"no candidate plan was costed"}
	}
	m := sm.Memory
	out := []string{
		fmt.Sprintf("closest: %s %s (%s over)", sm.Plan.Short(), sm.Why(), Bytes(m.Total-m.Budget)),
		fmt.Sprintf("it fits on devices with at least %s of memory", Bytes(m.Total)),
	}
	for k := 2; k <= 64; k *= 2 {
		big := j
		big.Devices = j.Devices * k
		if big.Validate() != nil {
			break
		}
		res, err := big.Search(Options{Fix: o.Fix, Top: 1})
		if err != nil {
			break
		}
		if len(res.Plans) > 0 {
			e := res.Plans[0]
			return append(out, fmt.Sprintf("or on %d devices (%d×): %s, %.4g s per step, %s of %s",
				big.Devices, k, e.Plan.Short(), e.Time.Step, Bytes(e.Memory.Total), Bytes(e.Memory.Budget)))
		}
	}
	return append(out, fmt.Sprintf("no plan fits on up to %d devices either: shorten the sequence or pin fewer keys", 64*j.Devices))
}
