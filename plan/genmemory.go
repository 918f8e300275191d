package plan

import "math"

// Memory of the general path, rank by rank: the dense and expert states
// (generalStates), the activations of the micro-batches in flight chunk by
// chunk, the transients and the buffers.

// memKinds are the activation sizes of one micro-batch, kind by kind (they
// do not depend on where the groups sit, so the search computes them once
// per plan, before its placements).
type memKinds struct {
	act         [2][2]float64 // kept by one layer of each kind
	working     float64       // the largest transient of recomputing a layer
	embed, head float64       // kept by the embedding and by the output layer and loss
	mtp         float64       // kept by the MTP modules (on the head's chunk)
	moeWS       float64       // the dispatcher's largest transient
	kp          [2][2]float64 // one layer's parameters of each kind: dense, expert
}

func (j Job) memKinds(p Plan, have [2][2]bool) memKinds {
	m := j.Model
	mk := memKinds{kp: j.kindParams(p)}
	if !m.general() {
		a := j.activations(p)
		mk.act[0][0], mk.working, mk.embed, mk.head = a.layer, a.working, a.embed, a.head
		return mk
	}
	r := recipe{j: j, p: p, k: newKernels(j.Cluster.Accel, p.Precision), T: j.tokens(p), t: float64(p.TP), chunks: 1}
	var rc routedCost
	if m.moe() {
		rc.local = j.BusiestExpertRows(p)
	}
	for a := 0; a < 2; a++ {
		for b := 0; b < 2; b++ {
			if have[a][b] {
				kept, w := r.kindAct(a == 1, rc)
				mk.act[a][b] = kept
				mk.working = math.Max(mk.working, w)
			}
		}
	}
	seqSplit := 1.0
	if p.SP {
		seqSplit = r.t
	}
	h := float64(m.Hidden)
	mk.head = r.T * (2*h*r.k.e/seqSplit + 4*float64(m.Vocab)/r.t)
	if m.MTP > 0 {
		last := m.Layers - 1
		a, b := kindIndex(m.moeLayer(last), m.windowLayer(last))
		mk.mtp = float64(m.MTP) * (mk.act[a][b] + mk.head + r.T*2*h*r.k.e)
	}
	mk.moeWS = r.moeWorkspace()
	return mk
}

// generalMemory is the most loaded rank's memory (layout.memRanks).
func (j Job) generalMemory(p Plan, lay *layout) Memory {
	return j.generalMemoryWith(p, lay, j.memKinds(p, lay.have))
}

func (j Job) generalMemoryWith(p Plan, lay *layout, mk memKinds) Memory {
	var worst Memory
	for i, g := range lay.genMem {
		if m := j.rankMemory(p, lay, mk, g); i == 0 || m.Total > worst.Total {
			worst = m
		}
	}
	return worst
}

// rankMemory is one rank's memory:
//
//	states       generalStates of its chunks' dense and expert parameters
//	activations  1F1B-family schedules: the rank's in-flight count
//	             (Job.inFlight) × one micro-batch through all its chunks;
//	             DualPipe: chunk by chunk, its in-flight count × its
//	             activations (pp+1, or 2pp+1 under DualPipeV, chunks in all);
//	             plus the output layer's for one micro-batch (GPipe: all)
//	             and one layer's recomputation working set
//	other        the runtime reserve; the largest transient (the sp gather,
//	             the logits, the dispatcher's buffers); ZeRO-2's two buckets
//	             or ZeRO-3's gathered unit; the pipeline's 4 boundary
//	             activations
func (j Job) rankMemory(p Plan, lay *layout, mk memKinds, g genRank) Memory {
	m := j.Model
	mem := Memory{Stage: g.rank, Layers: g.layers, Budget: j.Cluster.Accel.Memory}
	dense, expert := g.params(j, p, mk.kp, lay.C)
	generalStates(&mem, dense, expert, p, j.Cluster.Software)
	perMB, flight := g.perMB(mk)
	var act float64
	if p.Schedule.dual() {
		act = flight
		mem.InFlight = flight / math.Max(perMB, 1)
	} else {
		mem.InFlight = j.inFlight(p, g.rank)
		act = perMB * mem.InFlight
	}
	headMBs := 0.0
	if g.head {
		headMBs = 1
		if p.Schedule == GPipe && p.PP > 1 {
			headMBs = float64(j.MicroBatches(p))
		}
	}
	mem.ActPerMicroBatch = ceil(perMB + mk.head*math.Min(headMBs, 1))
	mem.Act = ceil(act + mk.head*headMBs + mk.working)
	mem.Reserved = j.Cluster.Accel.Reserved
	ws := 0.0
	T := j.tokens(p)
	e := actBytes(p.Precision)
	if p.SP {
		ws = T * float64(m.Hidden) * e
	}
	if g.head {
		ws = math.Max(ws, T*float64(m.Vocab)/float64(p.TP)*e)
	}
	mem.Workspace = ceil(math.Max(ws, mk.moeWS))
	mem.Buffers = ceil(j.generalBuffers(p, mk, dense+expert))
	mem.Other = mem.Reserved + mem.Workspace + mem.Buffers
	mem.Total = mem.Param + mem.Grad + mem.Optim + mem.Act + mem.Other
	return mem
}

// generalBuffers: ZeRO-2's two gradient buckets, ZeRO-3's gathered unit
// (the largest layer: its dense and expert parts, or the vocab-parallel
// embedding) for the layer in use, the prefetched one and its gradients,
// and a pipeline's send and receive buffers.
func (j Job) generalBuffers(p Plan, mk memKinds, P float64) float64 {
	w, g := weightBytes(p.Precision), gradBytes(p.Precision)
	b := 0.0
	switch p.ZeRO {
	case 2:
		b += 2 * math.Min(bucketParams, P) * g
	case 3:
		unit := math.Max(mk.kp[0][0]+mk.kp[0][1], mk.kp[1][0]+mk.kp[1][1])
		unit = math.Max(unit, float64(j.Model.Vocab)*float64(j.Model.Hidden)/float64(p.TP))
		b += unit * (2*w + g)
	}
	if p.PP > 1 {
		b += 4 * j.boundaryBytes(p)
	}
	return b
}
