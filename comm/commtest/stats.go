package commtest

import (
	"errors"
	"fmt"
	"time"

	"trellis/comm"
	"trellis/tensor"
)

// statsCase: a fresh group counts exactly the ops it completed, bytes
// between the smallest and largest buffer of each op, and Busy and Wait no
// longer than the wall time; Skew is part of Wait and, where the backend
// reports it, is the early member's wait for the late one (and not the late
// member's); a subgroup's stats are its own.
func statsCase(e *env) error {
	const p = 3
	start := time.Now()
	w := e.world(p, normalTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		sub, err := g.NewGroup("stats-sub", []int{0, 1, 2})
		if err != nil {
			return err
		}
		if s := g.Stats(); s.Ops != 0 || s.Bytes != 0 {
			return fmt.Errorf("fresh group: %+v", s)
		}
		big := make([]float32, 3*1000)
		var lo, hi int64
		ops := []func() error{
			func() error { return comm.AllReduce(g, comm.F32(big[:1000]), comm.Sum) },
			func() error { return comm.Barrier(g) },
			func() error { return comm.AllGather(g, comm.F32(big), comm.F32(make([]float32, 1000))) },
			func() error {
				return comm.ReduceScatter(g, comm.BF16(make([]tensor.BF16Bits, 10)), comm.BF16(make([]tensor.BF16Bits, 30)), comm.Max)
			},
		}
		sizes := [][2]int64{{4000, 4000}, {0, 0}, {4000, 12000}, {20, 60}}
		for i, op := range ops {
			if err := op(); err != nil {
				return err
			}
			lo += sizes[i][0]
			hi += sizes[i][1]
		}
		// A Wait that blocks is accounted: rank 1 issues its op late.
		if r == 1 {
			time.Sleep(20 * time.Millisecond)
		}
		before := g.Stats()
		waitStart := time.Now()
		if err := comm.AllReduce(g, comm.F32(big[:10]), comm.Avg); err != nil {
			return err
		}
		waited := time.Since(waitStart)
		after := g.Stats()
		lo, hi = lo+40, hi+40
		wall := time.Since(start)
		s := g.Stats()
		var errs []error
		if s.Ops != int64(len(ops)+1) {
			errs = append(errs, fmt.Errorf("Ops = %d after %d ops", s.Ops, len(ops)+1))
		}
		if s.Bytes < lo || s.Bytes > hi {
			errs = append(errs, fmt.Errorf("Bytes = %d, want within [%d, %d]", s.Bytes, lo, hi))
		}
		if s.Busy <= 0 || s.Busy > wall {
			errs = append(errs, fmt.Errorf("Busy = %v, want within (0, %v]", s.Busy, wall))
		}
		if s.Wait < 0 || s.Wait > wall {
			errs = append(errs, fmt.Errorf("Wait = %v, want within [0, %v]", s.Wait, wall))
		}
		if r == 0 && waited >= 10*time.Millisecond && s.Wait == 0 {
			errs = append(errs, fmt.Errorf("blocked %v in Wait but Stats.Wait is 0", waited))
		}
		skew, wait := after.Skew-before.Skew, after.Wait-before.Wait
		if s.Skew < 0 || s.Skew > s.Wait || skew < 0 || skew > wait {
			errs = append(errs, fmt.Errorf("Skew = %v (%v in the late op), want within [0, Wait = %v (%v)]", s.Skew, skew, s.Wait, wait))
		}
		if r == 0 && waited >= 10*time.Millisecond && skew != 0 && skew < waited/2 {
			errs = append(errs, fmt.Errorf("waited %v for the late member but Skew says %v of it", waited, skew))
		}
		if r == 1 && skew > 10*time.Millisecond {
			errs = append(errs, fmt.Errorf("the last member to arrive waited %v for peers (Skew), want about 0", skew))
		}
		if ss := sub.Stats(); ss != (comm.Stats{}) {
			errs = append(errs, fmt.Errorf("unused subgroup has stats %+v", ss))
		}
		return errors.Join(errs...)
	})
}
