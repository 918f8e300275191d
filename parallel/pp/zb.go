package pp

// zbH1 is Qi et al. 2023's ZB-H1: 1F1B's order of forwards F and input
// gradients B, with each weight gradient W deferred by r micro-batches on
// rank r. Rank r runs w = min(p−r−1, m) warm-up forwards, then for
// k = 0..m−1: F(w+k) (while any is left), B(k), and W(k−r) once k ≥ r; then
// the W left over. The last stage defers most: its W's fill the cooldown,
// where 1F1B's ranks wait for gradients, so the bubble shrinks from
// (p−1)(F+B+W) to (p−1)(F+B−W) (at F = B = W, a third). Every rank keeps
// at most p micro-batches in flight (counted from F to W): 1F1B's peak
// (rank 0's), reached on every rank.
//
// Every W is Movable: a rank that has waited on a receive as long as its
// last W took, with the message still due, runs its next deferred W
// (ahead.go), so a W can absorb a neighbour's stall longer than a W. The
// waits of the steady state are shorter (at pp = 2 the last rank's
// forwards wait for an activation sent exactly as they are due), so
// there the static order runs.
func zbH1(c Config) [][]Action {
	p, m := c.PP, c.Micro
	out := make([][]Action, p)
	for r := range out {
		w := min(p-r-1, m)
		for mb := 0; mb < w; mb++ {
			out[r] = append(out[r], Action{Op: Forward, MB: mb})
		}
		for k := 0; k < m; k++ {
			if w+k < m {
				out[r] = append(out[r], Action{Op: Forward, MB: w + k})
			}
			out[r] = append(out[r], Action{Op: Backward, MB: k})
			if k >= r {
				out[r] = append(out[r], Action{Op: Weight, MB: k - r, Movable: true})
			}
		}
		for mb := max(m-r, 0); mb < m; mb++ {
			out[r] = append(out[r], Action{Op: Weight, MB: mb, Movable: true})
		}
	}
	return out
}
