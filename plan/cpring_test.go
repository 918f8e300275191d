package plan

import (
	"math"
	"testing"
)

// The ring's exposed time and its bytes are one model: with no compute
// to hide behind and no latency, cpRing's forward and backward times are
// CPRingBytes' bytes over the link's bandwidth (cp−1 K/V blocks in the
// activation dtype forward; cp−1 blocks and cp fp32 sums backward); with
// compute longer than every step's transfer only the last sum, which
// comes home after the last step, stays exposed; and latency is paid per
// step (the backward's middle steps' two messages overlap theirs).
func TestCPRingTimeIsItsBytes(t *testing.T) {
	const kv, bw = 1 << 16, 1e6
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }
	for _, n := range []int{2, 3, 4, 8} {
		for _, e := range []float64{4, 2} {
			fwd, bwd := cpRing(n, kv, e, Link{BW: bw}, passTime{})
			bf, bb := CPRingBytes(n, kv, e, false)
			if !close(fwd, bf/bw) || !close(bwd, bb/bw) {
				t.Errorf("cp=%d e=%g: ring %.6g + %.6g s, bytes %g + %g over %g B/s", n, e, fwd, bwd, bf, bb, bw)
			}
			if _, again := CPRingBytes(n, kv, e, true); !close(again-bb, bf) {
				t.Errorf("cp=%d e=%g: recomputation adds %g bytes, want the forward's %g", n, e, again-bb, bf)
			}
			long := passTime{fwd: 100, bwd: 100}
			fwd, bwd = cpRing(n, kv, e, Link{BW: bw, Latency: 1e-3}, long)
			if want := 1e-3 + kv*4/bw; fwd != 0 || !close(bwd, want) {
				t.Errorf("cp=%d e=%g behind long compute: exposed %g + %g s, want 0 + %g (the last sum)", n, e, fwd, bwd, want)
			}
			fwd, bwd = cpRing(n, kv, e, Link{BW: math.Inf(1), Latency: 1e-3}, passTime{})
			if m := float64(n); !close(fwd, (m-1)*1e-3) || !close(bwd, m*1e-3+1e-3) {
				t.Errorf("cp=%d e=%g latency only: %g + %g s, want %g + %g", n, e, fwd, bwd, (m-1)*1e-3, m*1e-3+1e-3)
			}
		}
	}
	if f, b := cpRing(1, kv, 4, Link{BW: bw}, passTime{}); f != 0 || b != 0 {
		t.Errorf("cp=1: ring %g + %g s, want none", f, b)
	}
}
