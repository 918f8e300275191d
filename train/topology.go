package train

import (
	"fmt"
	"time"

	"trellis/comm"
	"trellis/mesh"
	"trellis/model"
	"trellis/parallel/pp"
	"trellis/parallel/tp"
	"trellis/plan"
	"trellis/tensor"
)

// topology is a rank's place in the plan's mesh and every group it
// computes with, built once from (plan, mesh, world):
//
//	tp     the tensor-parallel group (the mesh's fastest axis): the model's
//	       f/g collectives and the gradient norm's last sum
//	grads  the reduction group of the rank's parameters (the dp axis, and
//	       the cp axis with it: dp × cp, whose ranks hold the same weights
//	       and average their gradients; ZeRO shards over both):
//	params its twin for ZeRO's parameter gathers (its own queue)
//	cp     the context-parallel group (the cp axis, cp > 1): the ring attention
//	pipe   the pipeline's ranks (the pp axis): the gradient norm's sum
//	link   the pipeline's point-to-point group (activations and gradients)
//	tied   the first and last stage (pp > 1, a tied head): the tied embedding's gradient
//	ep     the expert-parallel group (ep > 1): ep consecutive ranks of the dp
//	       axis (dp indices ⌊d/ep⌋·ep … ⌊d/ep⌋·ep+ep−1, Megatron-Core's
//	       folding with etp = 1); rank q of it holds experts [q·E/ep, (q+1)·E/ep)
//	       of every MoE block: the model's dispatch and combine, and the
//	       expert gradient norm's sum
//	edp    the expert-data-parallel group (ep > 1): the ranks of the
//	       reduction group (dp, × cp) with the same ep index (d mod ep),
//	       dp/ep·cp of them, which hold the same experts: the expert
//	       tensors' reduction and ZeRO shards
//
// A group of one rank is a real group of size one (no traffic), so the
// strategies and the model need no special case for an axis of degree 1.
type topology struct {
	mesh   *mesh.Mesh
	coords mesh.Coord
	part   model.Part // the piece of every layer this rank computes
	dp     int        // this rank's index along the dp axis: the data it reads
	layout pp.Layout  // the pipeline stage's blocks and units

	tp            *tp.Comm // the model's view of the tensor-parallel group (nil: tp=1)
	tpGroup       comm.Group
	grads, params comm.Group
	pipe          comm.Group
	cp            comm.Group // nil unless cp > 1
	tied          comm.Group // nil unless this rank is the pipeline's first or last stage with pp > 1 and the head is tied
	ep, edp       comm.Group // nil unless ep > 1
	// epo and tok are ep_overlap=on's (nil otherwise): the paired
	// forward's expert-parallel group (the same ranks as ep, made right
	// after it by every rank, so each stream's collectives keep one order
	// on their own group) and the pair's compute token (parallel/pp),
	// whose idle time is the ep groups' exposed wait (epStats).
	epo     comm.Group
	tok     *pp.Token
	link    *pp.P2PLink
	closers []comm.Group
}

// newTopology makes the rank's groups. Every rank of the world calls it
// with the same plan, so each group is made by all of its ranks in the
// same order.
func newTopology(world comm.Group, m model.Config, p plan.Plan) (*topology, error) {
	ms, err := mesh.New(mesh.Config{PP: p.PP, DP: p.DP, CP: p.CP, TP: p.TP, Order: p.Order, World: world.Size()})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	id := world.Rank()
	t := &topology{mesh: ms}
	if t.coords, err = ms.Coords(id); err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	t.dp = t.coords.Get(mesh.DP)
	group := func(prefix string, axes ...mesh.Axis) (comm.Group, error) {
		ranks, err := ms.Group(id, axes...)
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		g, err := world.NewGroup(prefix+ms.GroupName(axes...), ranks)
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		t.closers = append(t.closers, g)
		return g, nil
	}
	fail := func(err error) (*topology, error) {
		t.close()
		return nil, err
	}
	if p.TP > 1 {
		if t.tpGroup, err = group("tp.", mesh.TP); err != nil {
			return fail(err)
		}
		if t.tp, err = tp.New(t.tpGroup); err != nil {
			return fail(err)
		}
		t.part = t.tp.Part(p.SP)
	}
	if t.grads, err = group("grad.", reductionAxes(p)...); err != nil {
		return fail(err)
	}
	if t.params, err = group("param.", reductionAxes(p)...); err != nil {
		return fail(err)
	}
	if p.CP > 1 {
		if t.cp, err = group("cp.", mesh.CP); err != nil {
			return fail(err)
		}
	}
	if ep, _ := p.Experts(); ep > 1 {
		if err := t.expertGroups(world, ep, reductionAxes(p), p.EPOverlap); err != nil {
			return fail(err)
		}
	}
	me := t.coords.Get(mesh.PP)
	if t.layout, err = pp.NewLayoutFor(m, pp.Kind(p.Schedule), p.PP, p.VPP, me); err != nil {
		return fail(err)
	}
	if p.PP > 1 {
		if t.pipe, err = group("pipe.", mesh.PP); err != nil {
			return fail(err)
		}
		ranks, _ := ms.Group(id, mesh.PP)
		if t.layout.TiedAcross() { // the first and last stage on different ranks (not DualPipeV's V, whose rank 0 holds both)
			g, err := world.NewGroup(fmt.Sprintf("pp.tied.%d-%d", ranks[0], ranks[p.PP-1]), []int{ranks[0], ranks[p.PP-1]})
			if err != nil {
				return fail(fmt.Errorf("train: %w", err))
			}
			t.tied = g
			t.closers = append(t.closers, g)
		}
		if t.link, err = pp.NewLayoutLink(world, ms.GroupName(mesh.PP), ranks, t.layout); err != nil {
			return fail(err)
		}
	}
	return t, nil
}

// expertGroups carves the expert-parallel group (ep consecutive ranks of
// the rank's dp group, at its cp index) out of the dp axis and the
// expert-data-parallel one (the ranks of its reduction group, dp × cp,
// whose dp index has the same ep index), and gives the model's part its
// experts. ep must divide dp (checkEP). With overlap (ep_overlap=on) a
// second group of the same ranks carries the paired forwards' all-to-alls.
func (t *topology) expertGroups(world comm.Group, ep int, axes []mesh.Axis, overlap bool) error {
	dp, err := t.mesh.Group(world.Rank(), mesh.DP)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if len(dp)%ep != 0 {
		return fmt.Errorf("train: ep=%d does not divide dp=%d", ep, len(dp))
	}
	d := t.dp
	lo := d / ep * ep
	epRanks := append([]int(nil), dp[lo:lo+ep]...)
	red, err := t.mesh.Group(world.Rank(), axes...) // dp, and cp with it
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	var edpRanks []int
	for _, id := range red {
		c, err := t.mesh.Coords(id)
		if err != nil {
			return fmt.Errorf("train: %w", err)
		}
		if c.Get(mesh.DP)%ep == d%ep {
			edpRanks = append(edpRanks, id)
		}
	}
	name := t.mesh.GroupName(mesh.DP)
	if t.ep, err = world.NewGroup(fmt.Sprintf("ep.%s.%d-%d", name, epRanks[0], epRanks[ep-1]), epRanks); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	t.closers = append(t.closers, t.ep)
	if overlap {
		if t.epo, err = world.NewGroup(fmt.Sprintf("epo.%s.%d-%d", name, epRanks[0], epRanks[ep-1]), epRanks); err != nil {
			return fmt.Errorf("train: %w", err)
		}
		t.closers = append(t.closers, t.epo)
		t.tok = pp.NewToken()
	}
	if t.edp, err = world.NewGroup(fmt.Sprintf("edp.%s.%d-%d", name, edpRanks[0], edpRanks[len(edpRanks)-1]), edpRanks); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	t.closers = append(t.closers, t.edp)
	t.part.EP, t.part.EPRank = ep, d%ep
	return nil
}

// epComm is the expert-parallel group for the model (nil: ep = 1); under
// ep_overlap=on the backward's runner's (paired false: ep) or the paired
// forwards' (epo), each giving the pair's token up while it waits.
func (t *topology) epComm(paired bool) model.EPComm {
	switch {
	case t.ep == nil:
		return nil
	case t.tok == nil:
		return groupEP{t.ep}
	case paired:
		return tokenEP{groupEP{t.epo}, t.tok}
	}
	return tokenEP{groupEP{t.ep}, t.tok}
}

// epStats is the expert-parallel groups' accounting (zero without one).
// Under ep_overlap=on the two groups' waits overlap each other and the
// other stream's compute: Wait is the exposed part, the token's idle time
// (no stream computing while one waits), and Skew the groups' skew in
// the proportion exposed/waited (the waits for peers cannot be told apart
// from the transfers once hidden; an estimate).
func (t *topology) epStats() comm.Stats {
	if t.ep == nil {
		return comm.Stats{}
	}
	if t.epo == nil {
		return t.ep.Stats()
	}
	st := t.ep.Stats().Add(t.epo.Stats())
	exposed, waited := t.tok.Exposed()
	skew := time.Duration(0)
	if waited > 0 {
		skew = time.Duration(float64(st.Skew) * min(1, float64(exposed)/float64(waited)))
	}
	st.Wait, st.Skew = exposed, min(skew, exposed)
	return st
}

// tokenEP is an EPComm that gives the pair's compute token up while its
// collective runs (pp.Token.Wait), so the other stream computes.
type tokenEP struct {
	g   groupEP
	tok *pp.Token
}

func (e tokenEP) ExchangeCounts(dst, src []float32) error {
	return e.tok.Wait(func() error { return e.g.ExchangeCounts(dst, src) })
}

func (e tokenEP) AllToAllV(dst, src tensor.Buf, send, recv []int) error {
	return e.tok.Wait(func() error { return e.g.AllToAllV(dst, src, send, recv) })
}

// groupEP is model.EPComm over a comm.Group: the counts by an all-to-all,
// the rows by comm.AllToAllV (16-bit rows travel as their bits).
type groupEP struct{ g comm.Group }

// epTag is the point-to-point tag of the expert all-to-alls (a group of
// their own: no other traffic shares it).
const epTag = 41

func (e groupEP) ExchangeCounts(dst, src []float32) error {
	return comm.AllToAll(e.g, comm.F32(dst), comm.F32(src))
}

func (e groupEP) AllToAllV(dst, src tensor.Buf, send, recv []int) error {
	return comm.AllToAllV(e.g, epBuf(dst), epBuf(src), send, recv, epTag)
}

// epBuf is b as a communication buffer.
func epBuf(b tensor.Buf) comm.Buf {
	if b.DType() == tensor.F32 {
		return comm.F32(b.F32())
	}
	return comm.BF16(tensor.BF16View(b.Bits()))
}

// reductionAxes are the mesh axes of a rank's reduction group: dp, and cp
// with it when cp > 1 (the ranks of a cp group hold the same weights and
// each computes a share of every sequence's gradient).
func reductionAxes(p plan.Plan) []mesh.Axis {
	if p.CP > 1 {
		return []mesh.Axis{mesh.DP, mesh.CP}
	}
	return []mesh.Axis{mesh.DP}
}

// reductionRank is world rank id's index in its reduction group.
func reductionRank(ms *mesh.Mesh, p plan.Plan, id int) int {
	ranks, err := ms.Group(id, reductionAxes(p)...)
	if err != nil {
		return 0
	}
	for i, r := range ranks {
		if r == id {
			return i
		}
	}
	return 0
}

// cpComm is the context-parallel group for the model (nil: cp = 1).
func (t *topology) cpComm() comm.Group {
	if t.cp == nil {
		return nil
	}
	return t.cp
}

// cpStats is the context-parallel group's accounting (zero without one).
func (t *topology) cpStats() comm.Stats {
	if t.cp == nil {
		return comm.Stats{}
	}
	return t.cp.Stats()
}

// normGroups are the groups the gradient norm's partial is summed over
// after the reduction group: the pipeline's, then the tensor-parallel one.
func (t *topology) normGroups() []comm.Group {
	var gs []comm.Group
	if t.pipe != nil {
		gs = append(gs, t.pipe)
	}
	if t.tpGroup != nil {
		gs = append(gs, t.tpGroup)
	}
	return gs
}

// tpComm is the model's view of the tensor-parallel group (nil: none).
func (t *topology) tpComm() model.TPComm {
	if t.tp == nil {
		return nil
	}
	return t.tp
}

// tpStats is the tensor-parallel group's accounting (zero without one).
func (t *topology) tpStats() comm.Stats {
	if t.tpGroup == nil {
		return comm.Stats{}
	}
	return t.tpGroup.Stats()
}

// close closes every group the topology made.
func (t *topology) close() {
	if t.link != nil {
		t.link.Close()
	}
	for _, g := range t.closers {
		g.Close()
	}
}

// checkTP rejects, before anything starts, a tensor-parallel plan the model
// or the devices cannot run: one line per broken rule, naming the numbers.
func checkTP(j Job, p plan.Plan) error {
	if j.Parallel.Devices != 0 && p.TP > j.Parallel.Devices {
		return fmt.Errorf("parallel.plan: tp=%d is larger than parallel.devices=%d", p.TP, j.Parallel.Devices)
	}
	if p.TP > 1 || p.SP {
		if err := (model.Part{TP: p.TP, SP: p.SP}).Validate(j.Model); err != nil {
			return fmt.Errorf("parallel.plan: %w", err)
		}
	}
	return nil
}

// checkCP rejects a context-parallel plan whose sequences do not split
// into 2·cp equal chunks (each rank holds two), or whose rank's share
// does not split over the tensor-parallel ranks under sp.
func checkCP(j Job, p plan.Plan) error {
	if p.CP <= 1 {
		return nil
	}
	T := j.Model.SeqLen
	if T%(2*p.CP) != 0 {
		return fmt.Errorf("parallel.plan: cp=%d: 2·cp=%d does not divide model.seq_len=%d (each cp rank holds chunks i and 2·cp−1−i of 2·cp equal chunks of every sequence)", p.CP, 2*p.CP, T)
	}
	if p.SP && (T/p.CP)%p.TP != 0 {
		return fmt.Errorf("parallel.plan: cp=%d, sp=on: tp=%d does not divide model.seq_len/cp=%d", p.CP, p.TP, T/p.CP)
	}
	return nil
}

// checkPipeline rejects a pipeline the engine cannot run, before any rank
// starts: the schedule's rules (pp.Config.Validate) and a stage without a
// layer.
func checkPipeline(j Job, p plan.Plan, accum int) error {
	if p.PP == 1 {
		return nil
	}
	if _, err := pp.Build(pp.Config{Kind: pp.Kind(p.Schedule), PP: p.PP, VPP: p.VPP, Micro: accum}); err != nil {
		return fmt.Errorf("parallel.plan: %w (micro-batches = train.global_batch / (dp × train.micro_batch) = %d)", err, accum)
	}
	if _, err := plan.ChunkLayers(j.Model.Layers, p.PP, p.VPP); err != nil {
		return fmt.Errorf("model.%w", err)
	}
	if p.ZeRO >= 2 && !j.Parallel.Overlap {
		return fmt.Errorf("parallel.overlap=false with pp=%d and zero=%d: a pipeline's ZeRO-2/3 reduces each bucket as its backward completes (the stage's backward passes interleave micro-batches); set parallel.overlap=true", p.PP, p.ZeRO)
	}
	return nil
}
