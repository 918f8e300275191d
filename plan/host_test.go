package plan

import (
	"math"
	"strings"
	"testing"
)

// hostJob is a small GPT on testdata/cpu-host.toml made one node of
// `cores` cores reaching `speedup`, with every rank on it.
func hostJob(t *testing.T, devices, cores int, speedup float64) Job {
	t.Helper()
	c := cpuHostCluster(t)
	c.DevicesPerNode, c.Cores, c.CoreSpeedup = 8, cores, speedup
	m := Model{Name: "tiny", Family: GPT, Layers: 4, Hidden: 128, Heads: 4, KVHeads: 4, FFN: 512, Vocab: 256, MaxSeq: 128, Tied: true}
	return Job{Model: m, Cluster: c, Devices: devices, Seq: 128, GlobalBatch: 8, Engine: &EngineStore{Threads: 1}}
}

func hostStep(t *testing.T, j Job, plan string) Time {
	t.Helper()
	p, err := Parse(plan)
	if err != nil {
		t.Fatal(err)
	}
	e, err := j.Evaluate(p)
	if err != nil {
		t.Fatal(err)
	}
	return e.Time
}

// Ranks sharing a host's cores: on 2 cores reaching 2× one, dp=2 takes
// half of dp=1's compute and dp=4 no less than dp=2 (four ranks, two
// cores); on cores reaching 1× (SMT siblings, a loaded host) dp=2 takes
// as long as dp=1. A pipeline's bubble is paid while the cores are not
// oversubscribed; when they are, other stages' work fills it where
// enough stages are ready: pp=4's four micro-batches on 2 cores leave
// less of the step idle than on 4 cores of their own, but not nothing
// (the engine measured 12 ms of a 44 ms step). The
// parts still add up to the step, and a cluster without cores (GPUs) is
// as before.
func TestHostCoresAreShared(t *testing.T) {
	near := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }
	j1 := hostJob(t, 1, 2, 2)
	one := hostStep(t, j1, "dp=1,mbs=2,precision=fp32,flash=off")
	two := hostStep(t, hostJob(t, 2, 2, 2), "dp=2,mbs=2,precision=fp32,flash=off")
	four := hostStep(t, hostJob(t, 4, 2, 2), "dp=4,mbs=2,precision=fp32,flash=off")
	if !near(two.Compute, one.Compute/2, 0.02) {
		t.Errorf("dp=2 on 2 cores at 2x: compute %g, want half of dp=1's %g", two.Compute, one.Compute)
	}
	if !near(four.Compute, two.Compute, 0.02) {
		t.Errorf("dp=4 on 2 cores: compute %g, want dp=2's %g (the cores are the limit)", four.Compute, two.Compute)
	}
	smt := hostStep(t, hostJob(t, 2, 2, 1), "dp=2,mbs=2,precision=fp32,flash=off")
	if !near(smt.Compute, one.Compute, 0.02) {
		t.Errorf("dp=2 on cores reaching 1x: compute %g, want dp=1's %g", smt.Compute, one.Compute)
	}
	pp2 := hostStep(t, hostJob(t, 2, 2, 2), "pp=2,mbs=2,precision=fp32,flash=off")
	pp4 := hostStep(t, hostJob(t, 4, 2, 2), "pp=4,mbs=2,precision=fp32,flash=off")
	if !(pp2.Bubble > 0) {
		t.Errorf("pp=2 on 2 cores: bubble %g, want the fill and drain", pp2.Bubble)
	}
	own := hostStep(t, hostJob(t, 4, 4, 4), "pp=4,mbs=2,precision=fp32,flash=off")
	if !(pp4.Bubble > 0) || pp4.Bubble/pp4.Step >= own.Bubble/own.Step {
		t.Errorf("pp=4 on 2 cores: bubble %g of %g, want some but a smaller share than on 4 cores (%g of %g)", pp4.Bubble, pp4.Step, own.Bubble, own.Step)
	}
	for _, tm := range []Time{one, two, four, smt, pp2, pp4} {
		if s := tm.Compute + tm.CommExposed + tm.Bubble + tm.Misc; !near(s, tm.Step, 1e-9) {
			t.Errorf("parts %g do not add up to the step %g", s, tm.Step)
		}
	}
	gpu := hostJob(t, 2, 0, 0)
	if tm := hostStep(t, gpu, "dp=2,mbs=2,precision=fp32,flash=off"); gpu.hostTime(tm, tm.Compute, nil) != tm {
		t.Errorf("without cores the time changed: %+v to %+v", tm, gpu.hostTime(tm, tm.Compute, nil))
	}
}

// The cluster file's cores and core_speedup: read, and refused out of range.
func TestHostCoresInClusterFile(t *testing.T) {
	base := "name = \"h\"\ndevices_per_node = 2\n%s\n[device]\nmemory_gib = 1\nmem_bw_gbps = 10\npeak_tflops = { fp32 = 0.2 }\n[intra]\nbw_gbps = 1\n[inter]\nbw_gbps = 1\n"
	c, err := ParseClusterFile([]byte(strings.Replace(base, "%s", "cores = 2\ncore_speedup = 1.5", 1)))
	if err != nil || c.Cores != 2 || c.CoreSpeedup != 1.5 {
		t.Fatalf("cores %d speedup %g err %v", c.Cores, c.CoreSpeedup, err)
	}
	for _, bad := range []string{"cores = 2", "cores = 2\ncore_speedup = 3", "cores = 2\ncore_speedup = 0.5", "cores = -1\ncore_speedup = 1"} {
		if _, err := ParseClusterFile([]byte(strings.Replace(base, "%s", bad, 1))); err == nil || !strings.Contains(err.Error(), "core") {
			t.Errorf("%q: got %v, want an error naming the key", bad, err)
		}
	}
}

// On a host whose ranks keep every core busy, ZeRO-3's gathers and
// reduce-scatters are exposed whole (their goroutines need a core the
// ranks hold); with a core to spare they hide behind the layers' compute.
func TestHostBusyExposesZeRO(t *testing.T) {
	busy := hostStep(t, hostJob(t, 2, 2, 2), "dp=2,zero=3,mbs=2,precision=fp32,flash=off")
	spare := hostStep(t, hostJob(t, 2, 4, 4), "dp=2,zero=3,mbs=2,precision=fp32,flash=off")
	if !(busy.DP > 2*spare.DP) {
		t.Errorf("ZeRO-3 exposed %g on busy cores, %g with cores to spare: want the busy one far larger", busy.DP, spare.DP)
	}
}

// The shared-core pipeline's schedule: on a core per lane it is the
// dedicated pipeline, (m + pp − 1)·(f + b), GPipe's as 1F1B's, and
// interleaved's (m + (pp − 1)/vpp)·(f + b); on one core
// it is all the work, none idle; on 2 cores for 4 stages of 4
// micro-batches it lies between the bounds the cores and the chain set;
// two replicas of a 2-stage pipeline on 2 cores keep both busy
// throughout (two first stages are ready at the start, two last ones at
// the end): the work over the cores.
func TestHostPipeMakespan(t *testing.T) {
	p := func(pp, m, lanes int, gpipe bool) hostPipe {
		return hostPipe{pp: pp, m: m, gpipe: gpipe, f: 1, b: 2, lanes: lanes}
	}
	for _, tc := range []struct {
		name  string
		h     hostPipe
		slots int
		want  float64
	}{
		{"1f1b, a core each", p(4, 8, 4, false), 4, 33},
		{"gpipe, a core each", p(4, 8, 4, true), 4, 33},
		{"1f1b, one core", p(4, 8, 4, false), 1, 96},
		{"gpipe, one core", p(4, 4, 4, true), 1, 48},
		{"two replicas of pp=2 on 2 cores", p(2, 4, 4, false), 2, 24},
		// Interleaved on a core each: (m + (pp − 1)/vpp)·(f + b).
		{"interleaved pp=2 vpp=2, a core each", hostPipe{pp: 2, m: 4, vpp: 2, f: 1, b: 2, lanes: 2}, 2, 13.5},
		{"interleaved pp=4 vpp=2 m=8, a core each", hostPipe{pp: 4, m: 8, vpp: 2, f: 1, b: 2, lanes: 4}, 4, 28.5},
		{"interleaved, two replicas on 2 cores", hostPipe{pp: 2, m: 4, vpp: 2, f: 1, b: 2, lanes: 4}, 2, 24},
		// As Go runs the goroutine ranks: a lane runs on while its next
		// pass is ready, the lanes its pass wakes wait on its core, and a
		// free core takes its own woken lane first. At t = 8 the middle
		// stage's first backward wakes the first stage (its B1) and runs
		// on into its third forward; the first stage gets a core at 9
		// (stolen from the middle stage's queue), and the drain's chain
		// ends at 18 — where a free core taking the lane ready longest
		// runs the first stage at 8 and ends at 17.
		{"1f1b pp=3, 3 micro-batches on 2 cores", p(3, 3, 3, false), 2, 18},
	} {
		if got := tc.h.makespan(tc.slots, 1); got != tc.want {
			t.Errorf("%s: makespan %g, want %g", tc.name, got, tc.want)
		}
	}
	h := p(4, 4, 4, false)
	got := h.makespan(2, 1)
	if work, chain := 4.0*4*3/2, (4.0+3)*3; got <= work || got <= chain || got > work+chain {
		t.Errorf("pp=4, 4 micro-batches on 2 cores: %g, want above both the work over the cores (%g) and the chain (%g)", got, work, chain)
	}
	if s := h.makespan(2, 1.5); math.Abs(s-1.5*got) > 1e-9 {
		t.Errorf("stretched by 1.5: %g, want %g", s, 1.5*got)
	}
}

// A tensor-parallel group's waits on a host whose ranks outnumber its
// cores cost only the cores they leave idle: tp=2 among four ranks on two
// cores is filled by the other replica's work (its collectives' latency
// is hidden, what they move is not: tp costs what it would on a link of
// no latency), tp=4 (the whole host) pays its collectives whole, and with
// a core per rank tp=2 pays them whole too. hostFill is comm.Crowding's
// share of the idle cores.
func TestHostFillsSmallGroupsWaits(t *testing.T) {
	for _, tc := range []struct {
		devices, cores, n int
		want              float64
	}{
		{4, 2, 2, 0}, {4, 2, 4, 1}, {4, 2, 3, 2.0 / 3}, {3, 2, 2, 0.75}, {8, 2, 7, 4.0 / 7}, {4, 4, 2, 1}, {2, 2, 2, 1}, {8, 2, 2, 0},
	} {
		if got := hostJob(t, tc.devices, tc.cores, 2).hostFill(tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%d ranks on %d cores, a group of %d: fill %g, want %g", tc.devices, tc.cores, tc.n, got, tc.want)
		}
	}
	if got := hostJob(t, 4, 0, 0).hostFill(2); got != 1 {
		t.Errorf("a cluster without cores: fill %g, want 1", got)
	}
	shared := hostStep(t, hostJob(t, 4, 2, 2), "dp=2,tp=2,mbs=2,precision=fp32,flash=off")
	own := hostStep(t, hostJob(t, 4, 4, 4), "dp=2,tp=2,mbs=2,precision=fp32,flash=off")
	whole := hostStep(t, hostJob(t, 4, 2, 2), "tp=4,mbs=2,precision=fp32,flash=off")
	free := hostJob(t, 4, 4, 4)
	free.Cluster.Intra.Latency = 0
	bw := hostStep(t, free, "dp=2,tp=2,mbs=2,precision=fp32,flash=off")
	if math.Abs(shared.TP-bw.TP) > 1e-12 || !(shared.TP > 0) || !(own.TP > shared.TP) {
		t.Errorf("exposed tp for tp=2 × dp=2: %g on 2 cores, want %g (its bandwidth part, > 0), and less than %g on 4 cores", shared.TP, bw.TP, own.TP)
	}
	wholeOwn := hostStep(t, hostJob(t, 4, 4, 4), "tp=4,mbs=2,precision=fp32,flash=off")
	if math.Abs(whole.TP-wholeOwn.TP) > 1e-12 {
		t.Errorf("tp=4 on 2 cores exposes %g, want all of it (%g, as on 4 cores)", whole.TP, wholeOwn.TP)
	}
	for _, tm := range []Time{shared, own, whole} {
		if s := tm.Compute + tm.CommExposed + tm.Bubble + tm.Misc; math.Abs(s-tm.Step) > 1e-9*tm.Step {
			t.Errorf("parts %g do not add up to the step %g", s, tm.Step)
		}
		if c := tm.TP + tm.CP + tm.PP + tm.DP + tm.EP; math.Abs(c-tm.CommExposed) > 1e-12 {
			t.Errorf("the axes' comm %g is not the exposed comm %g", c, tm.CommExposed)
		}
	}
}

// On a host whose ranks keep every core busy, ZeRO's traffic over
// emulated links (Cluster.OwnLinks: the wire time a sleep that needs
// no core) hides its wire time behind the ranks' compute, but not the
// hand-off on the host's own links: it is exposed more than on the own
// links alone and less than with every emulated second exposed; where the
// compute is long enough to cover the wire, only the own links' part and
// the first gather's wire remain.
func TestHostHidesEmulatedWire(t *testing.T) {
	base := hostJob(t, 4, 2, 2)
	emulated := func(j Job, own bool) Job {
		if own {
			j.Cluster.OwnLinks = &[2]Link{j.Cluster.Intra, j.Cluster.Inter}
		}
		j.Cluster.Intra = Link{BW: 200e6, Latency: 100e-6}
		j.Cluster.Inter = j.Cluster.Intra
		return j
	}
	plan := "dp=4,zero=3,mbs=2,precision=fp32,flash=off"
	own := hostStep(t, base, plan).DP
	hid := hostStep(t, emulated(base, true), plan).DP
	all := hostStep(t, emulated(base, false), plan).DP
	if !(own < hid && hid < all) {
		t.Errorf("ZeRO-3 exposed: %g on the own links, %g over emulated ones with their wire hidden, %g with none hidden: want them increasing", own, hid, all)
	}
	slow := base
	slow.Cluster.Accel.Peak = map[Precision]float64{FP32: 1e6, BF16: 1e6, FP16: 1e6, FP8: 1e6}
	covered := hostStep(t, emulated(slow, true), plan).DP
	if lim := own + (all-own)/4; !(covered < lim) {
		t.Errorf("ZeRO-3 over emulated links behind compute far longer than the wire: exposed %g, want under %g (the own links' %g and little of the rest)", covered, lim, own)
	}
}

// A pipeline's stages differ (the last holds the output layer and the
// loss): on a CPU host the throughput bound and the reported compute are
// the ranks' mean, not the slowest stage's times every rank, and the
// shared-core schedule runs each lane at its own stage's pace; the
// slowest stage's chain still bounds the step, and what the faster stages
// wait for it is bubble. pp=4 on 2 cores: the last stage 16% over the
// others.
func TestHostPipelineChargesEachStageItsOwn(t *testing.T) {
	j := hostJob(t, 4, 2, 2)
	p, err := Parse("pp=4,mbs=2,precision=fp32,flash=off")
	if err != nil {
		t.Fatal(err)
	}
	pl := place(p, j.Cluster.DevicesPerNode)
	sp, lc := j.shapeParams(p), j.layerCost(p, pl)
	var sum, slow float64
	for s := range p.PP {
		c := j.stage(p, pl, lc, sp, s).compute.total()
		sum += c
		slow = max(slow, c)
	}
	m := float64(j.MicroBatches(p))
	g := j.hostStretch()
	tm := hostStep(t, j, "pp=4,mbs=2,precision=fp32,flash=off")
	if want := g * m * sum / float64(p.PP); math.Abs(tm.Compute-want) > 1e-9*want {
		t.Errorf("pp=4 on 2 cores: compute %g, want the stages' mean stretched, %g (the slowest stage's would be %g)", tm.Compute, want, g*m*slow)
	}
	if !(tm.Bubble > 0) || math.Abs(tm.Compute+tm.CommExposed+tm.Bubble+tm.Misc-tm.Step) > 1e-9*tm.Step {
		t.Errorf("pp=4 on 2 cores: bubble %g, parts %g against the step %g", tm.Bubble, tm.Compute+tm.CommExposed+tm.Bubble+tm.Misc, tm.Step)
	}
	h := hostPipe{pp: 2, m: 4, f: 1, b: 2, lanes: 2}
	uneven := h
	uneven.fs, uneven.bs = []float64{0.5, 1}, []float64{1, 2}
	if a, b := h.makespan(2, 1), uneven.makespan(2, 1); !(b < a) || b < 4*3 {
		t.Errorf("2 stages on a core each: makespan %g with both at the slow pace, %g with the first at half: want less, and no less than the slow stage's 4 micro-batches (12)", a, b)
	}
}

// A CPU host's ranks that do not outnumber its cores poll their waits
// (the engine's comm/local.PollFor) and meet the cluster's polled link;
// ranks that outnumber them meet Intra. Under emulation the polled link
// is the own intra link. The cluster file's polled_ keys come together,
// in [intra] only.
func TestPolledIntraForHostsThatPoll(t *testing.T) {
	polled := Link{BW: 18e9, Latency: 3e-6}
	two, four := hostJob(t, 2, 2, 2), hostJob(t, 4, 2, 2)
	for _, j := range []*Job{&two, &four} {
		j.Cluster.PolledIntra = &polled
	}
	if got := two.polledHost(); got.Cluster.Intra != polled || got.Cluster.PolledIntra != nil {
		t.Errorf("2 ranks on 2 cores: intra %+v, want the polled %+v", got.Cluster.Intra, polled)
	}
	if got := four.polledHost(); got.Cluster.Intra != four.Cluster.Intra {
		t.Errorf("4 ranks on 2 cores: intra %+v, want Intra %+v", got.Cluster.Intra, four.Cluster.Intra)
	}
	emu := two
	emu.Cluster.OwnLinks = &[2]Link{two.Cluster.Intra, two.Cluster.Inter}
	if got := emu.polledHost(); got.Cluster.OwnLinks[0] != polled || got.Cluster.Intra != two.Cluster.Intra || emu.Cluster.OwnLinks[0] == polled {
		t.Errorf("emulated links: own %+v, intra %+v; want the polled own link, the emulated intra and the caller's links untouched", got.Cluster.OwnLinks[0], got.Cluster.Intra)
	}
	// The prediction follows: tp=2's exposed comm on the polled link is
	// the one with that link as Intra.
	plain := two
	plain.Cluster.PolledIntra, plain.Cluster.Intra = nil, polled
	if a, b := hostStep(t, two, "tp=2").CommExposed, hostStep(t, plain, "tp=2").CommExposed; a != b {
		t.Errorf("tp=2 on 2 cores: exposed comm %g, want %g (the polled link's)", a, b)
	}
	base := "name = \"h\"\ndevices_per_node = 2\ncores = 2\ncore_speedup = 2\n[device]\nmemory_gib = 8\nmem_bw_gbps = 30\npeak_tflops = { fp32 = 0.2 }\n"
	for _, c := range []struct{ links, want string }{
		{"[intra]\nbw_gbps = 10\nlatency_us = 20\npolled_bw_gbps = 18\n[inter]\nbw_gbps = 1\nlatency_us = 30\n", "give both or neither"},
		{"[intra]\nbw_gbps = 10\nlatency_us = 20\n[inter]\nbw_gbps = 1\nlatency_us = 30\npolled_bw_gbps = 18\npolled_latency_us = 3\n", "only [intra]"},
		{"[intra]\nbw_gbps = 10\nlatency_us = 20\npolled_bw_gbps = 0\npolled_latency_us = 3\n[inter]\nbw_gbps = 1\nlatency_us = 30\n", "intra.polled_bw_gbps"},
	} {
		if _, err := ParseClusterFile([]byte(base + c.links)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.links, err, c.want)
		}
	}
	c, err := ParseClusterFile([]byte(base + "[intra]\nbw_gbps = 10\nlatency_us = 20\npolled_bw_gbps = 18\npolled_latency_us = 3\n[inter]\nbw_gbps = 1\nlatency_us = 30\n"))
	if err != nil || c.PolledIntra == nil || math.Abs(c.PolledIntra.Latency-3e-6) > 1e-15 || math.Abs(c.PolledIntra.BW-18e9) > 1e-3 {
		t.Errorf("polled keys: %+v, %v; want 18 GB/s, 3 µs", c.PolledIntra, err)
	}
}
