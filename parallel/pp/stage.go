package pp

import (
	"errors"
	"fmt"
	"time"

	"trellis/comm"
	"trellis/device"
	"trellis/model"
	"trellis/trace"
)

// StageConfig is everything NewStage needs.
type StageConfig struct {
	GPT      *model.GPT   // the runner: its scratch, kernels and device (stashes are charged there)
	Params   model.Params // the rank's state (parallel/zero over the layout's units)
	Schedule *Schedule
	Layout   Layout
	Link     Link           // nil for a pipeline of one stage
	Device   *device.Device // the boundary buffers in flight are charged here (tag comm)
	Trace    *trace.Tracer  // nil: no tracing
	// RunAhead lets the executor run movable actions (zb-h1's W) ahead of
	// their place while it waits on a receive (ahead.go). It must be off
	// when a W communicates (its ranks' peers would see its collectives in
	// another order): under tensor parallelism (sequence parallelism
	// gathers the input again, full recomputation reruns the forward's
	// collectives) and when full recomputation under ZeRO-3 gathers weights.
	RunAhead bool
	// Pair and Token run a paired schedule's (Config.Pair) paired forwards
	// on a second runner beside the backward after each (pair.go): Pair
	// shares the rank's Params and has its own scratch; with Token every
	// compute action runs holding it, and the runners' expert-parallel
	// communication gives it up while it waits (Token.Wait).
	Pair  *model.GPT
	Token *Token
}

// Stage runs one pipeline rank's action list, in order but for movable
// actions (zb-h1's W), which it may run ahead where it would wait on a
// receive (ahead.go). It keeps one block stash per
// (micro-batch, chunk) in flight — allocated on first need at the size of
// the rank's largest chunk, returned to a free list at its backward (for
// zb-h1 at W's place in the list, wherever W ran) and laid out again for
// whichever chunk needs one next — and, on
// the last stage, one head stash per micro-batch between its F and B. So
// the act peak is
//
//	(micro-batches in flight over all the rank's chunks) × (largest chunk's stash)
//	+ (head stashes in flight: m for GPipe, else 1) × head stash
//	+ zb-h1's and dualpipev's weight stashes between B and W.
//
// Between two stages on this rank (DualPipeV's turn on rank pp−1) nothing
// is sent: F copies the activation from the stash of the chunk before, B
// leaves its input gradient in a boundary buffer for the chunk before's B.
type Stage struct {
	cfg    StageConfig
	free   []*model.Stash                // block stashes not in use, each sized for the largest chunk
	hfree  []*model.HeadStash            // head stashes not in use
	hlive  map[[2]int]*model.HeadStash   // (mb, last chunk) between F and B
	blocks [2]int                        // the rank's chunk of the largest stash, its blocks [lo, hi)
	live   map[[2]int]*model.Stash       // (mb, chunk) in flight
	wfree  [][]*model.WeightStash        // (vpp) zb-h1: weight stashes not in use
	wlive  map[[2]int]*model.WeightStash // zb-h1: (mb, chunk) between B and W
	recvs  map[[2]int]pending            // posted receives of activations (into the stash) or gradients
	sends  map[[2]int]pending            // activation sends in flight (read the stash)
	gsends []pending                     // gradient sends in flight
	local  map[[2]int]*device.Buffer     // (mb, chunk): the output gradient a stage after it on this rank passed it (DualPipeV's turn)
	bufs   []*device.Buffer              // boundary buffers: free
	n      int                           // B·T·C (B·T·C/t with sequence parallelism)
	waited time.Duration                 // time blocked on transfers: exposed communication
	crowd  time.Duration                 // the part of waited the rank's share of shared cores ran other ranks' work (comm.Crowding)
	held   int64                         // bytes of early messages charged to the device's comm tag

	movable []Action        // the rank's movable actions (zb-h1's W), in list order
	next    int             // movable[next] is the first not yet run this step
	ahead   map[[2]int]bool // (mb, chunk) whose W ran ahead of its place; its stashes wait for it
	aheadN  int             // W's run ahead, all steps
	lastW   time.Duration   // the last W's duration: the patience before running one ahead
}

// pending is an issued transfer and, for gradients, the buffer it uses.
type pending struct {
	w   *watched
	buf *device.Buffer
}

// NewStage checks the schedule against the layout.
func NewStage(c StageConfig) (*Stage, error) {
	switch {
	case c.GPT == nil || c.Params == nil || c.Schedule == nil || c.Device == nil || (c.Link == nil && c.Schedule.PP > 1):
		return nil, errors.New("pp: StageConfig needs GPT, Params, Schedule, Device and, with more than one stage, Link")
	case c.Schedule.PP != c.Layout.PP || c.Schedule.vpp() != c.Layout.VPP:
		return nil, fmt.Errorf("pp: schedule pp=%d vpp=%d, layout pp=%d vpp=%d", c.Schedule.PP, c.Schedule.vpp(), c.Layout.PP, c.Layout.VPP)
	case c.Schedule.Placement() != c.Layout.Placement():
		return nil, fmt.Errorf("pp: schedule=%s places its stages as %+v, the layout as %+v (pp.NewLayoutFor with the schedule)", c.Schedule.Kind, c.Schedule.Placement(), c.Layout.Placement())
	}
	var blocks [2]int // the chunk whose stash is the largest (an MoE model's blocks differ)
	for ch := 0; ch < c.Layout.VPP; ch++ {
		b, _, _ := c.Layout.Chunk(ch)
		if c.GPT.StageStashBytes(b[0], b[1], false) > c.GPT.StageStashBytes(blocks[0], blocks[1], false) {
			blocks = b
		}
	}
	if c.Schedule.Pair && (c.Pair == nil || c.Token == nil) {
		return nil, errors.New("pp: a paired schedule (ep_overlap=on) needs StageConfig.Pair and Token")
	}
	var movable []Action
	for _, a := range c.Schedule.Ranks[c.Layout.Rank] {
		if a.Movable && c.RunAhead {
			if a.Op != Weight {
				return nil, fmt.Errorf("pp: %v is movable; only weight gradients W may run ahead", a)
			}
			movable = append(movable, a)
		}
	}
	return &Stage{cfg: c, live: map[[2]int]*model.Stash{}, hlive: map[[2]int]*model.HeadStash{}, blocks: blocks,
		wfree: make([][]*model.WeightStash, c.Layout.VPP), wlive: map[[2]int]*model.WeightStash{},
		recvs: map[[2]int]pending{}, sends: map[[2]int]pending{}, local: map[[2]int]*device.Buffer{}, n: c.GPT.BoundaryFloats(),
		movable: movable, ahead: map[[2]int]bool{}}, nil
}

// StashBytes is one block stash: the rank's largest chunk's, without the
// head (HeadStashFloats).
func (s *Stage) StashBytes() int64 {
	return s.cfg.GPT.StageStashBytes(s.blocks[0], s.blocks[1], false)
}

// Step runs the schedule for one optimizer step: micro-batch mb is
// batch(mb), its loss scaled by dloss in the backward pass (1/m averages).
// It returns the sum of the micro-batches' losses on the rank that runs
// the last model stage, 0 elsewhere.
func (s *Stage) Step(batch func(mb int) (model.Batch, error), dloss float32) (float64, error) {
	var sum float64
	if tr := s.cfg.Trace; tr != nil && s.cfg.Schedule.PP > 1 {
		t0 := tr.Now()
		defer func() {
			tr.Span(trace.Step, "pipeline", t0, "schedule", string(s.cfg.Schedule.Kind), "micro-batches", s.cfg.Schedule.Micro)
		}()
	}
	s.next = 0
	clear(s.ahead)
	acts := s.cfg.Schedule.Ranks[s.cfg.Layout.Rank]
	for i := 0; i < len(acts); i++ {
		a := acts[i]
		var loss float64
		var err error
		switch {
		case a.Paired && (i+1 == len(acts) || acts[i+1].Op != Backward):
			err = errors.New("a paired forward must be followed by a backward")
		case a.Paired:
			loss, err = s.pair(a, acts[i+1], batch, dloss)
			i++
		default:
			loss, err = s.doHeld(a, batch, dloss)
		}
		if err == nil {
			err = s.chargeBuffered()
		}
		if err != nil {
			s.abort()
			return 0, fmt.Errorf("pp: rank %d, %v: %w", s.cfg.Layout.Rank, a, err)
		}
		sum += loss
	}
	return sum, s.drain()
}

// do runs one action.
func (s *Stage) do(a Action, batch func(int) (model.Batch, error), dloss float32) (float64, error) {
	key := [2]int{a.MB, a.Chunk}
	switch a.Op {
	case RecvAct:
		st, err := s.stash(key)
		if err != nil {
			return 0, err
		}
		b, _, _ := s.cfg.Layout.Chunk(a.Chunk)
		s.recvs[key] = pending{w: s.watch(s.cfg.Link.Recv(st.Residual(b[0]), a.Peer, false), "recv act", a)}
	case Forward:
		b, err := batch(a.MB)
		if err != nil {
			return 0, err
		}
		return s.forwardOn(s.cfg.GPT, a, key, b)
	case SendAct:
		b, _, _ := s.cfg.Layout.Chunk(a.Chunk)
		s.sends[key] = pending{w: s.watch(s.cfg.Link.Send(s.live[key].Residual(b[1]), a.Peer, false), "send act", a)}
	case RecvGrad:
		buf, err := s.buffer()
		if err != nil {
			return 0, err
		}
		s.recvs[key] = pending{w: s.watch(s.cfg.Link.Recv(buf.Data, a.Peer, true), "recv grad", a), buf: buf}
	case Backward:
		return 0, s.backward(a, key, dloss)
	case Weight:
		return 0, s.weight(a, key)
	case SendGrad:
		buf, err := s.buffer()
		if err != nil {
			return 0, err
		}
		copy(buf.Data, s.cfg.GPT.DResidual()[:s.n])
		s.gsends = append(s.gsends, pending{w: s.watch(s.cfg.Link.Send(buf.Data, a.Peer, true), "send grad", a), buf: buf})
	default:
		return 0, fmt.Errorf("action %v cannot run here", a)
	}
	return 0, nil
}

// forwardOn runs F(mb, chunk) on runner g: embedding (stage 0), the
// chunk's blocks, the head (last stage, whose loss it returns).
func (s *Stage) forwardOn(g *model.GPT, a Action, key [2]int, b model.Batch) (float64, error) {
	st, err := s.stash(key)
	if err != nil {
		return 0, err
	}
	if err := g.Load(st, b); err != nil {
		return 0, err
	}
	if p, ok := s.recvs[key]; ok {
		delete(s.recvs, key)
		if err := s.fill(p, a); err != nil {
			return 0, err
		}
		if err := s.wait(p, a); err != nil {
			return 0, err
		}
	}
	if prev, _ := s.cfg.Layout.Placement().Neighbours(s.cfg.Layout.Rank, a.Chunk); prev.Local(s.cfg.Layout.Rank) {
		// the stage before runs here (DualPipeV's turn): its output is this input
		src, ok := s.live[[2]int{a.MB, prev.Chunk}]
		if !ok {
			return 0, errors.New("forward before the forward of the stage before it, on this rank")
		}
		b, _, _ := s.cfg.Layout.Chunk(a.Chunk)
		copy(st.Residual(b[0]), src.Residual(b[0]))
	}
	t0 := s.cfg.Trace.Now()
	defer s.span(a, t0, false)
	return s.runForward(g, a.Chunk, st)
}

// runForward is the compute of a chunk's forward pass on runner g.
func (s *Stage) runForward(g *model.GPT, c int, st *model.Stash) (float64, error) {
	p := s.cfg.Params
	bounds, first, last := s.cfg.Layout.Chunk(c)
	if first {
		if err := g.EmbedForward(p, st); err != nil {
			return 0, err
		}
	}
	for l := bounds[0]; l < bounds[1]; l++ {
		if err := g.BlockForward(p, st, l); err != nil {
			return 0, err
		}
	}
	if !last {
		return 0, nil
	}
	loss, err := g.HeadForward(p, st)
	return float64(loss), err
}

// backward runs B(mb, chunk) from the received gradient (or the loss) down
// to the chunk's input, and frees the stash.
func (s *Stage) backward(a Action, key [2]int, dloss float32) error {
	st, ok := s.live[key]
	if !ok {
		return errors.New("backward without its forward")
	}
	if p, ok := s.sends[key]; ok { // the stash's output must have left
		delete(s.sends, key)
		if err := s.wait(p, a); err != nil {
			return err
		}
	}
	g, p := s.cfg.GPT, s.cfg.Params
	bounds, first, last := s.cfg.Layout.Chunk(a.Chunk)
	prev, next := s.cfg.Layout.Placement().Neighbours(s.cfg.Layout.Rank, a.Chunk)
	st.SetLossWeight(dloss)            // the MoE layers' aux losses, on every stage
	if next.Local(s.cfg.Layout.Rank) { // the stage after runs here (DualPipeV's turn): its input gradient
		buf, ok := s.local[key]
		if !ok {
			return errors.New("backward before the backward of the stage after it, on this rank")
		}
		delete(s.local, key)
		copy(g.DResidual(), buf.Data)
		s.bufs = append(s.bufs, buf)
	} else if !last {
		rp, ok := s.recvs[key]
		if !ok {
			return errors.New("backward without its output gradient")
		}
		delete(s.recvs, key)
		if err := s.fill(rp, a); err != nil {
			return err
		}
		if err := s.wait(rp, a); err != nil {
			return err
		}
		copy(g.DResidual(), rp.buf.Data)
		s.bufs = append(s.bufs, rp.buf)
	}
	t0 := s.cfg.Trace.Now()
	if last {
		if err := g.HeadBackward(p, st, dloss); err != nil {
			return err
		}
		if !s.cfg.Layout.First() && s.cfg.Layout.Tied { // the tied head's gradient of unit 0 is complete (the embedding's, on a rank holding the first stage too, completes it there)
			if err := p.GradsDone(0); err != nil {
				return err
			}
		}
	}
	var ws *model.WeightStash
	if s.cfg.Schedule.Split() {
		var err error
		if ws, err = s.weightStash(key); err != nil {
			return err
		}
	}
	for l := bounds[1] - 1; l >= bounds[0]; l-- {
		var err error
		if ws != nil {
			err = g.BlockBackwardInput(p, st, ws, l)
		} else {
			err = g.BlockBackward(p, st, l)
		}
		if err != nil {
			return err
		}
	}
	if first {
		if err := g.EmbedBackward(p, st); err != nil {
			return err
		}
	}
	s.span(a, t0, false)
	if prev.Local(s.cfg.Layout.Rank) { // pass the input gradient to the stage before, on this rank
		buf, err := s.buffer()
		if err != nil {
			return err
		}
		copy(buf.Data, g.DResidual()[:s.n])
		s.local[[2]int{a.MB, prev.Chunk}] = buf
	}
	s.releaseHead(key, st)
	if ws == nil {
		delete(s.live, key)
		s.free = append(s.free, st)
	}
	return nil
}

// weight is W(mb, chunk)'s place in the list (zb-h1): the blocks'
// deferred weight gradients, unless they ran ahead (ahead.go); then the
// stash and the weight stash are free.
func (s *Stage) weight(a Action, key [2]int) error {
	st, ws := s.live[key], s.wlive[key]
	if st == nil || ws == nil {
		return errors.New("weight gradient without its split backward")
	}
	if s.ahead[key] {
		delete(s.ahead, key)
	} else {
		if a.Movable && s.cfg.RunAhead {
			if s.next >= len(s.movable) || s.movable[s.next] != a {
				return fmt.Errorf("movable weight gradients out of order: next is #%d of %v", s.next, s.movable)
			}
			s.next++
		}
		if err := s.weightGrads(a, key, false); err != nil {
			return err
		}
	}
	delete(s.live, key)
	delete(s.wlive, key)
	s.free = append(s.free, st)
	s.wfree[a.Chunk] = append(s.wfree[a.Chunk], ws)
	return nil
}

// weightGrads runs W(mb, chunk)'s compute: the chunk's blocks' weight
// gradients from the weight stash, last block first (ahead: run before the
// action's place in the list, traced as such).
func (s *Stage) weightGrads(a Action, key [2]int, ahead bool) error {
	st, ws := s.live[key], s.wlive[key]
	t0 := s.cfg.Trace.Now()
	start := time.Now()
	bounds, _, _ := s.cfg.Layout.Chunk(a.Chunk)
	for l := bounds[1] - 1; l >= bounds[0]; l-- {
		if err := s.cfg.GPT.BlockBackwardWeight(s.cfg.Params, st, ws, l); err != nil {
			return err
		}
	}
	s.lastW = time.Since(start)
	s.span(a, t0, ahead)
	return nil
}

// wait blocks on p (the wait lane of the trace).
func (s *Stage) wait(p pending, a Action) error {
	if p.w.done() {
		return p.w.result()
	}
	t0 := time.Now()
	c := comm.CrowdingOf(p.w.w)
	mark := c.Mark()
	err := p.w.settle()
	end := time.Now()
	s.waited += end.Sub(t0)
	s.crowd += c.Crowded(mark, end.Sub(t0))
	if s.cfg.Trace != nil {
		s.cfg.Trace.SpanTo(trace.Wait, "wait "+a.String(), t0, end)
	}
	return err
}

// CommStats is the point-to-point traffic: Busy from the link's groups,
// Wait the time this rank blocked on it (the watchers' waits excluded).
func (s *Stage) CommStats() comm.Stats {
	if s.cfg.Link == nil {
		return comm.Stats{}
	}
	st := s.cfg.Link.Stats()
	st.Wait, st.Crowded = s.waited, s.crowd
	return st
}

// span records a compute action (ahead: a movable one run before its place).
func (s *Stage) span(a Action, t0 time.Time, ahead bool) {
	if s.cfg.Trace == nil {
		return
	}
	args := []any{"mb", a.MB, "chunk", a.Chunk}
	if ahead {
		args = append(args, "ahead", true)
	}
	s.cfg.Trace.Span(trace.Compute, fmt.Sprintf("%v mb%d c%d", a.Op, a.MB, a.Chunk), t0, args...)
}
