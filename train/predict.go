package train

import (
	"fmt"
	"maps"
	"math"
	"runtime"

	"trellis/device"
	"trellis/internal/bounded"
	"trellis/mesh"
	"trellis/model"
	"trellis/parallel/flat"
	"trellis/parallel/pp"
	"trellis/parallel/zero"
	"trellis/plan"
	"trellis/precision"
)

// The engine's memory prediction is the planner's (plan.Job.StageMemory
// on a cluster with engine_stash), parameterised by what the engine
// stores (plan.EngineStore): its stash and backward-scratch formulas live
// in package plan next to the published ones, its ZeRO communication
// buffers come from parallel/zero's accounting (zero.Shape.Memory, which
// knows the bucket layout and its padding). One model serves the
// end-of-run report, --metrics and the tests that hold it to the
// measured peaks.

// planModel is the engine's model as the planner describes models: GPT-2's
// GELU MLP of 4h, one key/value head per head, learned positions, a tied
// head, biases everywhere; or a Llama's RMSNorm, SwiGLU of FFN, its
// key/value heads, rotary positions, no biases, its head tied or not.
func planModel(m model.Config) plan.Model {
	if m.IsLlama() {
		pm := plan.Model{Name: "trellis-llama", Family: plan.Llama, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
			KVHeads: m.KV(), FFN: m.FFNWidth(), Vocab: m.Vocab, MaxSeq: m.SeqLen, Tied: m.Tied(), Dropout: m.Dropout > 0}
		if m.Experts > 0 { // arch's MoE layers: l ≥ dense_first with (l − dense_first) % every = 0
			every := max(1, m.MoEEvery)
			pm.Name = "trellis-moe"
			pm.MoE = &plan.MoE{Experts: m.Experts, TopK: m.TopK, FFN: m.ExpertWidth(), SharedFFN: m.SharedWidth(),
				DenseFirst: m.DenseFirst, Every: every, Phase: m.DenseFirst % every, CapacityFactor: m.CapacityFactor, Score: "softmax",
				SelectionBias: m.RouterExpertBias}
			if m.SigmoidRouter() {
				pm.MoE.Score = "sigmoid"
			}
		}
		return pm
	}
	return plan.Model{Name: "trellis-gpt", Family: plan.GPT, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads,
		KVHeads: m.Heads, FFN: 4 * m.Hidden, Vocab: m.Vocab, MaxSeq: m.SeqLen, Tied: true, AttnBias: true,
		MLPBias: true, Dropout: m.Dropout > 0}
}

// hostCluster is the built-in estimate of this machine as the planner's
// cluster, when the job names no cluster file: the profile's host model
// (docs/PLANNER.md, "The time model on a CPU host") with documented
// figures in place of measurements — one device per rank at its threads'
// cores of the stated peak (settings.peak: runPeak, nothing measured),
// the ranks sharing runtime.NumCPU() cores that scale linearly
// (core_speedup = cores), a 40 µs hand-off per collective between
// goroutine ranks (the profile measures 36–51 µs), the device budget (or
// the machine's memory shared by the ranks) as memory, and the figures of
// plan/testdata/cpu-host.toml for the rest.
func hostCluster(s settings) plan.Cluster {
	mem := s.budget
	if mem == 0 {
		mem = max(1, physicalMemory()/int64(max(1, s.ranks)))
	}
	cores := max(1, min(s.ranks*s.threads, runtime.NumCPU()))
	peak := s.peak / float64(cores) * float64(s.threads) // one rank's: its threads' cores
	if !(peak > 0) {
		peak = 1e9
	}
	return plan.Cluster{
		Name:           "built-in estimate of this machine",
		Accel:          plan.Accel{Name: "cpu-rank", Peak: map[plan.Precision]float64{plan.FP32: peak, plan.BF16: peak, plan.FP16: peak, plan.FP8: peak}, Memory: mem, MemBW: 20e9, GEMMEff: 0.6, GEMMKnee: 32, AttnEff: 0.3, MemEff: 0.7, KernelGap: 1e-6},
		DevicesPerNode: max(1, s.ranks),
		Intra:          plan.Link{BW: 10e9, Latency: 40e-6},
		Inter:          plan.Link{BW: 1.1e9, Latency: 50e-6},
		EngineStash:    true,
		Cores:          runtime.NumCPU(),
		CoreSpeedup:    float64(runtime.NumCPU()),
	}
}

// jobCluster is the cluster the prediction uses: parallel.cluster's file
// when set (engine_stash forced on: its ranks run this engine), else the
// built-in estimate; the second result says which.
func (j Job) jobCluster(s settings) (plan.Cluster, string, error) {
	c, src, err := j.fileCluster(s)
	if err != nil {
		return c, src, err
	}
	return withLinks(c, s), src + linkNote(s), nil
}

// withLinks is c with the job's emulated links (parallel.link_bandwidth,
// parallel.link_latency: comm/local slows every collective phase to
// latency + bytes/bandwidth) as both of its link classes, where they are
// slower than c's: the prediction of the network the run emulates. c's
// own links are kept as its OwnLinks (the emulated wire time is a sleep
// that needs no core; the own links' hand-off needs one). A launched
// world's ranks (processes) do not emulate links.
func withLinks(c plan.Cluster, s settings) plan.Cluster {
	if s.processes || (s.linkBW == 0 && s.linkLat == 0) {
		return c
	}
	c.OwnLinks = &[2]plan.Link{c.Intra, c.Inter}
	for _, l := range []*plan.Link{&c.Intra, &c.Inter} {
		if s.linkBW > 0 && s.linkBW < l.BW {
			l.BW = s.linkBW
		}
		if lat := s.linkLat.Seconds(); lat > l.Latency {
			l.Latency = lat
		}
	}
	return c
}

// linkNote names the emulated links in the prediction's source.
func linkNote(s settings) string {
	if s.processes || (s.linkBW == 0 && s.linkLat == 0) {
		return ""
	}
	return fmt.Sprintf(", with the emulated links (parallel.link_*: %.4g MB/s, %v)", s.linkBW/1e6, s.linkLat)
}

// fileCluster is jobCluster without the emulated links.
func (j Job) fileCluster(s settings) (plan.Cluster, string, error) {
	if j.Parallel.Cluster == "" {
		return hostCluster(s), "built-in estimate (set parallel.cluster to a `trellis profile -o` file)", nil
	}
	b, err := bounded.ReadFile(j.Parallel.Cluster, bounded.Config, "cluster file")
	if err != nil {
		return plan.Cluster{}, "", fmt.Errorf("parallel.cluster=%q: %w", j.Parallel.Cluster, err)
	}
	c, err := plan.ParseClusterFile(b)
	if err != nil {
		return plan.Cluster{}, "", fmt.Errorf("parallel.cluster=%q: %w", j.Parallel.Cluster, err)
	}
	c.EngineStash = true
	if bf, ok := c.Accel.Peak[plan.BF16]; ok && c.Accel.Peak[plan.FP8] == 0 {
		// The engine's fp8 runs bf16 GEMMs on quantised operands (model/fp8.go).
		peaks := maps.Clone(c.Accel.Peak)
		peaks[plan.FP8] = bf
		c.Accel.Peak = peaks
	}
	if c.Cores > 0 && !s.processes {
		// A profiled host running the ranks as goroutines: all of them
		// share its cores and its in-process link, however many there are.
		c.DevicesPerNode = max(c.DevicesPerNode, s.ranks)
	}
	if s.budget > 0 {
		c.Accel.Memory = s.budget
	}
	return c, "cluster file " + j.Parallel.Cluster, nil
}

// planJob is the planner's job for a rank at index dpRank of its
// reduction group (dp, or dp × cp)
// and tensor-parallel index tpRank (its ZeRO buffers depend on its shard),
// with the engine's store for whichever plan the planner asks about.
func (j Job) planJob(s settings, c plan.Cluster, dpRank, tpRank int) plan.Job {
	store := &plan.EngineStore{Threads: s.threads}
	if f := s.policy.F8; f.Recipe == precision.Delayed {
		store.FP8History = f.History
	}
	// comm/local's emulated links carry point-to-point messages on a link
	// per pair of ranks (expert parallelism's all-to-all-v's).
	store.PairLinks = !s.processes && (s.linkBW > 0 || s.linkLat > 0)
	store.Buffers = func(p plan.Plan, stage int) float64 { return j.engineBuffers(s, p, stage, dpRank, tpRank) }
	store.Buckets = func(p plan.Plan, stage int) float64 { return j.engineBuckets(s, p, stage) }
	return plan.Job{Model: planModel(j.Model), Cluster: c, Devices: s.ranks, Seq: j.Model.SeqLen,
		GlobalBatch: j.Train.GlobalBatch, Engine: store}
}

// engineBuffers is what the engine charges to tag comm under p on
// pipeline stage stage: ZeRO-2 and -3's buckets as parallel/zero accounts
// them for the stage's units (an upper bound), and a pipeline's boundary
// buffers (at most four (B,s,h) activations a model chunk: a send and a
// receive each way, also an upper bound; 4·vpp under the interleaved
// schedule, whose chunks each send and receive both ways — four had
// been the bound for every chunk of a rank, and a loaded machine found a
// fifth message buffered, 1 run in 60 of pp=2,vpp=2 — eight under
// DualPipeV, whose two chunks per rank each send and receive both ways,
// rank pp−1's turn of the V passing its gradient through one of them),
// and under cp the ring's messages that
// arrive before their receives are posted (model's chargeRing): a rank's
// predecessor on the ring is at most one ring pass ahead, so at most
// 2cp−3 key/value blocks (the compute dtype) and 2cp−2 fp32 sums of
// their gradients, blocks of kv = B·(T/cp)·2·KV·d/t values:
//
//	ring = (2cp−3)·kv·e + (2cp−2)·kv·4      (an upper bound)
func (j Job) engineBuffers(s settings, p plan.Plan, stage, dpRank, tpRank int) float64 {
	var b float64
	if p.PP > 1 {
		n := 4.0
		switch p.Schedule {
		case plan.DualPipeV:
			n = 8
		case plan.Interleaved:
			n = 4 * float64(max(1, p.VPP))
		}
		b = n * 4 * float64(p.MBS) * float64(j.Model.SeqLen/max(1, p.CP)) * float64(j.Model.Hidden)
	}
	if p.CP > 1 {
		n := float64(p.CP)
		kv := float64(p.MBS) * float64(j.Model.SeqLen/p.CP) * 2 * float64(j.Model.KV()*j.Model.HeadSize()/max(1, p.TP))
		e := 4.0
		if policy(p.Precision, j.Train).Half() {
			e = 2
		}
		b += (2*n-3)*kv*e + (2*n-2)*kv*4
	}
	if p.ZeRO < 2 {
		return b
	}
	l, err := pp.NewLayoutFor(j.Model, pp.Kind(p.Schedule), p.PP, p.VPP, min(stage, p.PP-1))
	if err != nil {
		return b
	}
	c := s
	c.accum = accumOf(j.Train.GlobalBatch, p)
	c.policy = policy(p.Precision, j.Train)
	part := model.Part{TP: p.TP, Rank: min(tpRank, p.TP-1), SP: p.SP}
	ep, _ := p.Experts()
	if ep > 1 {
		part.EP = ep // every ep rank holds as many experts
	}
	sh := stateShape(j, c, p, part, l)
	sh.Rank = min(dpRank, p.DP*max(1, p.CP)-1)
	if ep > 1 {
		return b + float64(epComm(sh, ep))
	}
	m, err := sh.Memory()
	if err != nil {
		return b
	}
	return b + float64(m.Comm)
}

// epComm is the comm tag's bound of an expert-parallel rank of shape sh
// (the whole stage's layout over dp): its dense instance's over dp and
// its expert instance's over edp (dp/ep ranks, the rank's index in it
// ⌊d/ep⌋), whose buffers may be held at once.
func epComm(sh zero.Shape, ep int) int64 {
	dl, el, _ := splitExperts(sh.Layout)
	d, e := sh, sh
	d.Layout = dl
	var sum int64
	if m, err := d.Memory(); err == nil {
		sum += m.Comm
	}
	if len(el.Units) == 0 {
		return sum
	}
	e.Layout, e.TiedUnits, e.Ranks, e.Rank = el, nil, sh.Ranks/ep, sh.Rank/ep
	if m, err := e.Memory(); err == nil {
		sum += m.Comm
	}
	return sum
}

// accumOf is the micro-batches per step of p for a global batch of gb
// sequences (0 when p does not divide it: not known).
func accumOf(gb int, p plan.Plan) int {
	if per := p.DP * p.MBS; per > 0 && gb%per == 0 {
		return gb / per
	}
	return 0
}

// predictMemory is every rank's predicted peak bytes per device tag (in
// device.Tags order) and in all, on cluster c.
func (j Job) predictMemory(s settings, c plan.Cluster) ([]Predicted, error) {
	p := s.enginePlan
	m, err := mesh.New(mesh.Config{PP: p.PP, DP: p.DP, CP: p.CP, TP: p.TP, Order: p.Order, World: s.ranks})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	out := make([]Predicted, s.ranks)
	for r := range out {
		co, err := m.Coords(r)
		if err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
		pj := j.planJob(s, c, reductionRank(m, p, r), co.Get(mesh.TP))
		if err := pj.Check(p); err != nil {
			return nil, fmt.Errorf("train: the planner cannot predict plan %s: %w", p.Short(), err)
		}
		mem := pj.StageMemory(p, co.Get(mesh.PP))
		out[r] = Predicted{Rank: r, Memory: mem}
		for i, t := range device.Tags() {
			out[r].Peak[i] = mem.ByTag()[t.String()]
		}
		out[r].PeakAll = mem.Param + mem.Grad + mem.Optim + mem.Act + mem.Workspace + mem.Buffers
	}
	return out, nil
}

// Predicted is one rank's predicted memory.
type Predicted struct {
	Rank    int
	Peak    [6]int64 // per device tag, as RankStats.Peak
	PeakAll int64    // the tags' sum: the engine's peak when every tag peaks in the same step
	Memory  plan.Memory
}

// engineBuckets is how many buckets the engine cuts a rank's parameters
// into for its data-parallel reductions under p (parallel/flat: whole
// units, grouped up to parallel.bucket_size): each is a collective. Under
// a pipeline, the stage's share of the whole model's buckets (at least
// one); 0 when the layout cannot be made.
func (j Job) engineBuckets(s settings, p plan.Plan, stage int) float64 {
	lay := j.Model.PartLayout(model.Part{TP: p.TP, SP: p.SP})
	sizes := make([]int, len(lay.Units))
	total := 0
	for i, u := range lay.Units {
		sizes[i], total = u.Size, total+u.Size
	}
	bl, err := flat.New(flat.Config{UnitSizes: sizes, MaxElems: int(s.bucket / 4), Ranks: max(1, p.DP)})
	if err != nil || total == 0 {
		return 0
	}
	n := float64(len(bl.Buckets))
	if p.PP > 1 {
		n = max(1, math.Ceil(n/float64(p.PP)))
	}
	return n
}
