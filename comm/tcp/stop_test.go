package tcp

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"trellis/comm"
	"trellis/comm/commtest"
)

// TestStopStress repeats commtest's close and kill cases, with direct and
// ring all-reduces: operations the stopped rank had finished must complete
// everywhere (its frames can trail an abort that names it), later ones must
// fail, naming the stopped rank.
func TestStopStress(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 8
	}
	for k := 0; k < rounds; k++ {
		gs, errs := tryWorld(t, 4, time.Second*raceSlow, nil)
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
		err := commtest.Parallel(gs, 20*time.Second, func(r int, g comm.Group) error {
			buf := make([]float32, 1000+(k%4/2)*(1<<17))
			for i := 0; ; i++ {
				if r == 1 && i == 3 {
					if k%2 == 0 {
						g.Close()
					} else {
						kill(g)
					}
					return nil
				}
				if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
					var pe *comm.PeerError
					if i < 3 || !errors.As(err, &pe) || pe.Rank != 1 {
						return fmt.Errorf("iteration %d: %w (want success before the stop, then rank 1 named)", i, err)
					}
					return nil
				}
			}
		})
		for _, g := range gs {
			g.Close()
		}
		if err != nil {
			t.Fatalf("round %d: %v", k, err)
		}
	}
}
