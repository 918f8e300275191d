package pp

import (
	"strings"
	"testing"
	"time"
)

// A paired one-stage 1F1B (ep_overlap=on) is F0, then F(k+1) beside B(k),
// then the last B: the backwards in micro-batch order, two micro-batches
// in flight (Simulate and PeakInFlight agree); only 1F1B at pp=1 pairs.
func TestPairedSchedule(t *testing.T) {
	for m, want := range map[int]string{
		1: "rank 0: F0.0 B0.0\n",
		4: "rank 0: F0.0 F1.0+ B0.0 F2.0+ B1.0 F3.0+ B2.0 B3.0\n+ runs beside",
	} {
		c := Config{Kind: OneFOneB, PP: 1, Micro: m, Pair: true}
		s, err := Build(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Format(); !strings.Contains(got, want) {
			t.Errorf("m=%d: %q, want %q", m, got, want)
		}
		res, err := Simulate(s, Costs{F: 1, B: 2, W: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.InFlight[0] != PeakInFlight(c, 0) || PeakInFlight(c, 0) != min(2, m) {
			t.Errorf("m=%d: %d in flight, PeakInFlight %d, want min(2, m)", m, res.InFlight[0], PeakInFlight(c, 0))
		}
	}
	for _, c := range []Config{{Kind: OneFOneB, PP: 2, Micro: 4, Pair: true}, {Kind: GPipe, PP: 1, Micro: 4, Pair: true}} {
		if _, err := Build(c); err == nil || !strings.Contains(err.Error(), "pair (ep_overlap=on) needs schedule=1f1b with pp=1") {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// The token's exposed time is the time it lay free while a stream
// waited: a wait alone is exposed, a wait beside the other stream's
// compute is not; a Wait with the token free (outside a step) is not
// counted.
func TestTokenExposed(t *testing.T) {
	tok := NewToken()
	const d = 30 * time.Millisecond
	nap := func() error { time.Sleep(d); return nil }
	if err := tok.Wait(nap); err != nil { // nobody holds it: not a step's
		t.Fatal(err)
	}
	if e, w := tok.Exposed(); e != 0 || w != 0 {
		t.Fatalf("a wait outside a step: exposed %v of %v", e, w)
	}
	tok.Acquire()
	if err := tok.Wait(nap); err != nil {
		t.Fatal(err)
	}
	tok.Release()
	e1, w1 := tok.Exposed()
	if e1 < d || w1 < d {
		t.Fatalf("a wait alone: exposed %v of %v, want at least %v", e1, w1, d)
	}
	// One stream waits 2d while the other holds the token for 3d: no exposed time.
	tok.Acquire()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tok.Acquire()
		time.Sleep(3 * d) // computing
		tok.Release()
	}()
	if err := tok.Wait(func() error { time.Sleep(2 * d); return nil }); err != nil {
		t.Fatal(err)
	}
	tok.Release()
	<-done
	e2, w2 := tok.Exposed()
	if w2-w1 < 2*d || e2-e1 > d {
		t.Errorf("a wait hidden by compute: exposed %v of %v more, want under %v of at least %v", e2-e1, w2-w1, d, 2*d)
	}
}
