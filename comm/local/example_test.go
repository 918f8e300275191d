package local_test

import (
	"fmt"
	"sync"

	"trellis/comm"
	"trellis/comm/local"
)

// A pipeline step between two stages: each posts its receive and its send
// as one batch and waits, whatever the other issues first. Stage 0 sends
// activations forward and receives gradients; stage 1 the reverse.
func ExampleBatchP2P() {
	gs, _ := local.New(local.Config{Size: 2})
	const tagAct, tagGrad = 1, 2
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer g.Close()
			mine, theirs := []float32{float32(10 * (r + 1))}, []float32{0}
			var ops []comm.P2POp
			if r == 0 {
				ops = []comm.P2POp{comm.RecvOp(comm.F32(theirs), 1, tagGrad), comm.SendOp(comm.F32(mine), 1, tagAct)}
			} else {
				ops = []comm.P2POp{comm.RecvOp(comm.F32(theirs), 0, tagAct), comm.SendOp(comm.F32(mine), 0, tagGrad)}
			}
			err := comm.BatchP2P(g, ops).Wait()
			out[r] = fmt.Sprintf("stage %d got %g (err %v)", r, theirs[0], err)
		}()
	}
	wg.Wait()
	fmt.Println(out[0])
	fmt.Println(out[1])
	// Output:
	// stage 0 got 20 (err <nil>)
	// stage 1 got 10 (err <nil>)
}
