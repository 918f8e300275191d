package pp

// dualPipeV is DualPipeV's order (deepseek-ai/DualPipe's dualpipev.py, the
// steps of DeepSeek-V3 §3.2.1 cut in half): rank r of p holds chunk 0
// (stage r) and chunk 1 (stage 2p−1−r) and, with m ≥ 2p micro-batches,
// runs eight phases, F_c and B_c the next forward and backward of chunk c
// (each chunk's in micro-batch order), B_c·W a backward whose W follows at
// once, B_c alone a backward whose W is deferred to the next W, which
// runs the oldest deferred one:
//
//	1  2(p−r−1) × F0                    5  (p−r−1) × (B1·W, F1, B0·W)
//	2  (r+1) × (F0, F1)                  6  (r+1) × (B1, B0), the later half deferred
//	3  (p−r−1) × (B1, W, F1)             7  (p−r−1) × (W, B0)
//	4  (m−2p+r+1) × (F0, B1·W, F1, B0·W) 8  (r+1) × W
//
// A pair "F, B·W" of phases 4 and 5 is dualpipev.py's overlapped
// forward-backward chunk: adjacent here, the one's messages in flight
// while the other computes. Phase 6 starts deferring at its middle backward
// (i = ⌊(r+1)/2⌋: before its B1 on odd ranks, before its B0 on even ones),
// so r+1 W's are deferred in all and phases 7 and 8 run them.
//
// Per chunk costs F, B, W the bubble is the reference's (p−1)(F&B + B −
// 3W) with F&B = F+B+W (nothing overlaps compute here): (p−1)(F + 2B − 2W)
// per rank, the makespan 6m + (p−1) at F = B = W = 1 — a sixth of 1F1B's
// and half of zb-h1's bubble in the same chunk units, 2(p−1)(F+B+W) and
// 2(p−1)(F+B−W) for stages of two chunks (Simulate measures it; the golden
// files and TestDualPipeVBubble hold it). Chunk 0 holds at most 2p − r
// micro-batches in flight (its warm-up and phase 4's first F0), chunk 1
// r + 1, and both peak together: 2p+1 pairs (PeakInFlight).
func dualPipeV(c Config) [][]Action {
	p, m := c.PP, c.Micro
	out := make([][]Action, p)
	for r := range out {
		var (
			acts     []Action
			fwd, bwd [2]int   // next micro-batch per chunk
			deferred []Action // W's waiting, oldest first
		)
		f := func(ch int) {
			acts = append(acts, Action{Op: Forward, MB: fwd[ch], Chunk: ch})
			fwd[ch]++
		}
		b := func(ch int, defer_ bool) {
			a := Action{Op: Backward, MB: bwd[ch], Chunk: ch}
			bwd[ch]++
			acts = append(acts, a)
			w := Action{Op: Weight, MB: a.MB, Chunk: ch}
			if defer_ {
				deferred = append(deferred, w)
			} else {
				acts = append(acts, w)
			}
		}
		w := func() {
			acts = append(acts, deferred[0])
			deferred = deferred[1:]
		}
		for range 2 * (p - r - 1) { // 1
			f(0)
		}
		for range r + 1 { // 2
			f(0)
			f(1)
		}
		for range p - r - 1 { // 3
			b(1, true)
			w()
			f(1)
		}
		for range m - 2*p + r + 1 { // 4
			f(0)
			b(1, false)
			f(1)
			b(0, false)
		}
		for range p - r - 1 { // 5
			b(1, false)
			f(1)
			b(0, false)
		}
		zb := false
		for i := range r + 1 { // 6
			if i == (r+1)/2 && r%2 == 1 {
				zb = true
			}
			b(1, zb)
			if i == (r+1)/2 && r%2 == 0 {
				zb = true
			}
			b(0, zb)
		}
		for range p - r - 1 { // 7
			w()
			b(0, true)
		}
		for range r + 1 { // 8
			w()
		}
		out[r] = acts
	}
	return out
}
