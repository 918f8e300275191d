package commtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"trellis/comm"
)

// rankValue is what world rank w contributes in the group tests, distinct per
// group so that a reduction over the wrong members shows.
func rankValue(w, group int) float32 { return float32(1 + w + 10*group) }

// sumOver is the sum of rankValue over the world ranks ws.
func sumOver(ws []int, group int) float32 {
	s := float32(0)
	for _, w := range ws {
		s += rankValue(w, group)
	}
	return s
}

// subgroups: on 8 ranks as a 2×4 grid, every rank makes its row, its column,
// the reversed world and, inside its row, its pair; all-reduces issued on all
// of them at once must each reduce over the right members, and an all-gather
// on the reversed world follows the subgroup's rank order.
func subgroups(e *env) error {
	const p = 8
	w := e.world(p, normalTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		row := []int{r / 4 * 4, r/4*4 + 1, r/4*4 + 2, r/4*4 + 3}
		col := []int{r % 4, r%4 + 4}
		rev := []int{7, 6, 5, 4, 3, 2, 1, 0}
		gr, err1 := g.NewGroup("row", row)
		gc, err2 := g.NewGroup("col", col)
		gv, err3 := g.NewGroup("rev", rev)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		pairIdx := []int{r % 4 / 2 * 2, r%4/2*2 + 1} // ranks within the row group
		gp, err := gr.NewGroup("pair", pairIdx)
		if err != nil {
			return err
		}
		pair := []int{row[pairIdx[0]], row[pairIdx[1]]}
		checks := []struct {
			name  string
			g     comm.Group
			world []int
		}{{"world", g, []int{0, 1, 2, 3, 4, 5, 6, 7}}, {"row", gr, row}, {"col", gc, col}, {"rev", gv, rev}, {"pair", gp, pair}}
		bufs := make([][]float32, len(checks))
		var ws []comm.Work
		for i, c := range checks {
			if got := c.g.GlobalRanks(); !slices.Equal(got, c.world) {
				return fmt.Errorf("%s: GlobalRanks %v, want %v", c.name, got, c.world)
			}
			if c.g.Size() != len(c.world) || c.world[c.g.Rank()] != r {
				return fmt.Errorf("%s: Rank %d Size %d, world ranks %v, me %d", c.name, c.g.Rank(), c.g.Size(), c.world, r)
			}
			bufs[i] = []float32{rankValue(r, i), rankValue(r, i) * 2}
			ws = append(ws, c.g.AllReduce(comm.F32(bufs[i]), comm.Sum))
		}
		gathered := make([]float32, p)
		ws = append(ws, gv.AllGather(comm.F32(gathered), comm.F32([]float32{float32(r)})))
		for i := len(ws) - 1; i >= 0; i-- {
			if err := ws[i].Wait(); err != nil {
				return err
			}
		}
		for i, c := range checks {
			if want := sumOver(c.world, i); bufs[i][0] != want || bufs[i][1] != 2*want {
				return fmt.Errorf("%s: all-reduce gave %v, want [%g %g]", c.name, bufs[i], want, 2*want)
			}
		}
		for i, v := range gathered {
			if v != float32(rev[i]) {
				return fmt.Errorf("rev: all-gather gave %v, want world ranks in subgroup order %v", gathered, rev)
			}
		}
		return nil
	})
}

// namedGroups: two groups over the same ranks, "a" and "b", driven by two
// goroutines per rank, progress independently; odd ranks issue on "a"
// before "b", even ranks wait for "b" before touching "a", which deadlocks a
// backend that runs both on one queue.
func namedGroups(e *env) error {
	const p, rounds = 4, 20
	w := e.world(p, normalTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		all := []int{0, 1, 2, 3}
		ga, err1 := g.NewGroup("a", all)
		gb, err2 := g.NewGroup("b", all)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if r%2 == 0 {
			if err := pingGroup(gb, 1, r); err != nil {
				return fmt.Errorf("b first: %w", err)
			}
		}
		wa := ga.AllReduce(comm.F32([]float32{1}), comm.Sum)
		if r%2 == 1 {
			if err := pingGroup(gb, 1, r); err != nil {
				return fmt.Errorf("b second: %w", err)
			}
		}
		if err := wa.Wait(); err != nil {
			return err
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, gg := range []comm.Group{ga, gb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = pingGroup(gg, rounds, r)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// pingGroup all-reduces the rank's value k times and checks the sums.
func pingGroup(g comm.Group, k, r int) error {
	for i := 0; i < k; i++ {
		buf := []float32{rankValue(r, i)}
		if err := comm.AllReduce(g, comm.F32(buf), comm.Sum); err != nil {
			return err
		}
		if want := sumOver(g.GlobalRanks(), i); buf[0] != want {
			return fmt.Errorf("round %d: sum %g, want %g", i, buf[0], want)
		}
	}
	return nil
}

// asyncOrder: ops issued together run in issue order, whatever order they
// are waited in.
func asyncOrder(e *env) error {
	const p = 4
	w := e.world(p, normalTimeout)
	return each(w.Groups, func(r int, g comm.Group) error {
		// Broadcast then all-reduce of one buffer: p·x_root only in this order.
		x := []float32{float32(10 + r)}
		var ws []comm.Work
		ws = append(ws, g.Broadcast(comm.F32(x), p-1), g.AllReduce(comm.F32(x), comm.Sum))
		// Independent all-reduces.
		bufs := make([][]float32, 6)
		for i := range bufs {
			bufs[i] = []float32{rankValue(r, i), float32(i)}
			ws = append(ws, g.AllReduce(comm.F32(bufs[i]), comm.Max))
		}
		// Gather the all-reduced x: needs the earlier ops done first.
		gathered := make([]float32, p)
		ws = append(ws, g.AllGather(comm.F32(gathered), comm.F32(x)))
		for i := len(ws) - 1; i >= 0; i-- {
			if err := ws[i].Wait(); err != nil {
				return err
			}
		}
		want := float32(p * (10 + p - 1))
		if x[0] != want {
			return fmt.Errorf("broadcast then all-reduce gave %g, want %g (ops ran out of order?)", x[0], want)
		}
		for i, v := range gathered {
			if v != want {
				return fmt.Errorf("all-gather issued last saw %g at %d, want %g", v, i, want)
			}
		}
		for i, b := range bufs {
			if b[0] != rankValue(p-1, i) || b[1] != float32(i) {
				return fmt.Errorf("all-reduce %d gave %v", i, b)
			}
		}
		return nil
	})
}
