package plan

import (
	"fmt"
	"strconv"
)

// importMegatron reads Megatron-LM arguments (megatronTable) into a plan
// for the job: dp is the job's devices over tp·pp·cp, as Megatron derives
// it from the world size. The model's shape flags must describe the job's
// model.
func (j Job) importMegatron(text string) (Imported, error) {
	g, notes, err := readMegatron(text)
	if err != nil {
		return Imported{}, err
	}
	p := Default()
	for _, f := range []struct {
		flag string
		dst  *int
	}{{"--tensor-model-parallel-size", &p.TP}, {"--pipeline-model-parallel-size", &p.PP},
		{"--context-parallel-size", &p.CP}, {"--micro-batch-size", &p.MBS}} {
		if *f.dst, err = g.int(f.flag, 1); err != nil {
			return Imported{}, err
		}
		if *f.dst < 1 || *f.dst > MaxDevices {
			return Imported{}, fmt.Errorf("plan: megatron arguments: %s %d: want 1..%d", f.flag, *f.dst, MaxDevices)
		}
	}
	n, ok := product(j.Devices, p.TP, p.PP, p.CP)
	if !ok || j.Devices%n != 0 {
		return Imported{}, fmt.Errorf("plan: megatron arguments: tp·pp·cp = %d·%d·%d does not divide the %d devices", p.TP, p.PP, p.CP, j.Devices)
	}
	p.DP = j.Devices / n
	if err := j.megatronPipeline(g, &p, &notes); err != nil {
		return Imported{}, err
	}
	p.SP = g.has("--sequence-parallel")
	if want := p.SP && p.TP > 1 && j.Cluster.TPCommOverlap; g.has("--tp-comm-overlap") != want {
		notes = append(notes, fmt.Sprintf("--tp-comm-overlap given=%v, but the cluster %s says tp_comm_overlap=%v: the cluster's is used",
			g.has("--tp-comm-overlap"), j.Cluster.Name, j.Cluster.TPCommOverlap))
	}
	if p.ZeRO, err = megatronZeRO(g); err != nil {
		return Imported{}, err
	}
	if err := j.megatronExperts(g, &p, &notes); err != nil {
		return Imported{}, err
	}
	if p.DP*p.CP > 1 && p.ZeRO <= 1 && !g.has("--overlap-grad-reduce") {
		notes = append(notes, "no --overlap-grad-reduce: the gradient reduction is not overlapped with the backward, as the planner costs it (this prediction is optimistic)")
	}
	if p.DP*p.CP > 1 && p.ZeRO == 1 && !g.has("--overlap-param-gather") {
		notes = append(notes, "no --overlap-param-gather: the parameter all-gather is not overlapped with the next forward, as the planner costs it (this prediction is optimistic)")
	}
	if g.has("--use-tp-pp-dp-mapping") {
		p.Order = "tp-cp-pp-dp"
	}
	if p.Recompute, err = megatronRecompute(g, &notes); err != nil {
		return Imported{}, err
	}
	if g.has("--fp16") && g.has("--bf16") {
		// Megatron's validate_args asserts the two are not both set.
		return Imported{}, fmt.Errorf("plan: megatron arguments: --fp16 and --bf16 are both given: Megatron refuses that; give one")
	}
	switch {
	case g.has("--fp8-format"):
		p.Precision = FP8
	case g.has("--bf16"):
		p.Precision = BF16
	case g.has("--fp16"):
		p.Precision = FP16
	default:
		p.Precision = FP32
	}
	if v, ok := g["--attention-backend"]; ok {
		switch v {
		case "flash", "fused", "auto":
			p.Flash = true
		case "unfused", "local":
			p.Flash = false
		default:
			return Imported{}, fmt.Errorf("plan: megatron arguments: --attention-backend %q: want flash, fused, unfused, local or auto", v)
		}
	}
	im := Imported{Plan: p}
	if im.GlobalBatch, err = g.int("--global-batch-size", 0); err != nil {
		return Imported{}, err
	}
	if im.Seq, err = g.int("--seq-length", 0); err != nil {
		return Imported{}, err
	}
	shapeNotes, err := j.megatronShape(g)
	if err != nil {
		return Imported{}, err
	}
	if g.has("--num-layers") {
		if err := j.megatronMoEShape(g); err != nil {
			return Imported{}, err
		}
	}
	im.Notes = sortedNotes(append(notes, shapeNotes...))
	return im, nil
}

// megatronPipeline reads vpp and the layer split, which must be the one
// the planner costs (Megatron fails on a split it cannot make).
func (j Job) megatronPipeline(g megatronRead, p *Plan, notes *[]string) error {
	if g.has("--pipeline-model-parallel-layout") {
		return j.megatronLayoutRead(g, p, notes)
	}
	L := j.Model.Layers
	embed, loss := g.has("--account-for-embedding-in-pipeline-split"), g.has("--account-for-loss-in-pipeline-split")
	k := 0
	for _, b := range []bool{embed, loss} {
		if b {
			k++
		}
	}
	vpl, err := g.int("--num-layers-per-virtual-pipeline-stage", 0)
	if err != nil {
		return err
	}
	if g.has("--num-layers-per-virtual-pipeline-stage") && vpl < 1 {
		return fmt.Errorf("plan: megatron arguments: --num-layers-per-virtual-pipeline-stage %d: want at least 1 layer per chunk", vpl)
	}
	if vpl > 0 {
		if (L+k)%p.PP != 0 || (L+k)/p.PP%vpl != 0 {
			return fmt.Errorf("plan: megatron arguments: --num-layers-per-virtual-pipeline-stage %d: %d layers (with %d counted for embedding and loss) do not split into pp=%d stages of chunks of %d", vpl, L+k, k, p.PP, vpl)
		}
		p.VPP = (L + k) / p.PP / vpl
	} else if p.VPP, err = g.int("--num-virtual-stages-per-pipeline-rank", 1); err != nil {
		return err
	}
	if p.VPP < 1 || p.VPP > MaxVPP {
		return fmt.Errorf("plan: megatron arguments: %d virtual stages per pipeline rank: want 1..%d", p.VPP, MaxVPP)
	}
	if p.VPP > 1 {
		p.Schedule = Interleaved
		if g.has("--no-overlap-p2p-communication") {
			*notes = append(*notes, "--no-overlap-p2p-communication: interleaved transfers are not overlapped, as the planner costs them (this prediction is optimistic)")
		}
	}
	first, hasFirst := g["--decoder-first-pipeline-num-layers"]
	last, hasLast := g["--decoder-last-pipeline-num-layers"]
	if !hasFirst && !hasLast {
		C := p.PP * p.VPP
		switch {
		case p.PP == 1:
		case (L+k)%C != 0:
			return fmt.Errorf("plan: megatron arguments: pp·vpp = %d·%d does not divide --num-layers %d (+%d for embedding and loss): Megatron needs an even split or --decoder-first/last-pipeline-num-layers", p.PP, p.VPP, L, k)
		case embed && !loss:
			*notes = append(*notes, "--account-for-embedding-in-pipeline-split alone lightens the first chunk; the planner costs its split, the last chunk lighter")
		}
		return nil
	}
	pt, ok := newPartition(L, p.PP, p.VPP)
	if p.VPP > 1 || p.PP < 2 || k > 0 || !ok || !megatronSplit(L, p.PP, 1) {
		return fmt.Errorf("plan: megatron arguments: an uneven split with pp=%d, vpp=%d is not one the planner models", p.PP, p.VPP)
	}
	for _, s := range []struct {
		flag, v string
		has     bool
		stage   int
	}{{"--decoder-first-pipeline-num-layers", first, hasFirst, 0}, {"--decoder-last-pipeline-num-layers", last, hasLast, p.PP - 1}} {
		want := pt.count(s.stage)
		if !s.has && want == pt.count(1) {
			continue
		}
		if n, err := strconv.Atoi(s.v); err != nil || n != want {
			return fmt.Errorf("plan: megatron arguments: %s %q: the planner splits %d layers over %d stages as %s (lighter ends first), so it models %d there",
				s.flag, s.v, L, p.PP, pt.describe(), want)
		}
	}
	return nil
}

// megatronZeRO reads the ZeRO stage.
func megatronZeRO(g megatronRead) (int, error) {
	if g.has("--use-custom-fsdp") || g.has("--use-megatron-fsdp") {
		s := g["--data-parallel-sharding-strategy"]
		for z, name := range []string{"no_shard", "optim", "optim_grads", "optim_grads_params"} {
			if s == name || (s == "" && z == 0) {
				return z, nil
			}
		}
		return 0, fmt.Errorf("plan: megatron arguments: --data-parallel-sharding-strategy %q: want no_shard, optim, optim_grads or optim_grads_params", s)
	}
	if g.has("--use-distributed-optimizer") {
		return 1, nil
	}
	return 0, nil
}

// megatronRecompute reads the recomputation policy; a full recomputation
// other than every layer's input (uniform, 1 layer) is costed as that.
func megatronRecompute(g megatronRead, notes *[]string) (Recompute, error) {
	switch v := g["--recompute-granularity"]; v {
	case "":
		return RecomputeNone, nil
	case "selective":
		return RecomputeSelective, nil
	case "full":
		if m, n := g["--recompute-method"], g["--recompute-num-layers"]; m != "uniform" || n != "1" {
			*notes = append(*notes, fmt.Sprintf("--recompute-method %q --recompute-num-layers %q: costed as recompute=full (every layer's input kept, uniform 1)", m, n))
		}
		return RecomputeFull, nil
	default:
		return "", fmt.Errorf("plan: megatron arguments: --recompute-granularity %q: want full or selective", v)
	}
}

// megatronShape checks the arguments' model shape against the job's model:
// a different number is an error naming the flag; absent shape flags
// leave the model as given.
func (j Job) megatronShape(g megatronRead) ([]string, error) {
	m := j.Model
	if !g.has("--num-layers") {
		return []string{"no --num-layers: the model is " + m.Name + " as given"}, nil
	}
	kv := m.Heads
	if g.has("--group-query-attention") {
		kv = m.KVHeads
	}
	ints := []struct {
		flag string
		want int
		def  int
	}{{"--num-layers", m.Layers, 0}, {"--hidden-size", m.Hidden, 0}, {"--num-attention-heads", m.Heads, 0},
		{"--ffn-hidden-size", m.FFN, 4 * m.Hidden}, {"--num-query-groups", kv, kv}, {"--kv-channels", m.HD(), m.HD()}}
	for _, c := range ints {
		n, err := g.int(c.flag, c.def)
		if err != nil {
			return nil, err
		}
		if n != c.want {
			return nil, fmt.Errorf("plan: megatron arguments: %s %d, but the model %s has %d", c.flag, n, m.Name, c.want)
		}
	}
	if m.KVHeads != m.Heads && !g.has("--group-query-attention") {
		return nil, fmt.Errorf("plan: megatron arguments: no --group-query-attention, but the model %s has kv_heads=%d of heads=%d", m.Name, m.KVHeads, m.Heads)
	}
	bools := []struct {
		what      string
		got, want bool
	}{
		{"--swiglu (a gated MLP)", g.has("--swiglu"), m.gated()},
		{"--normalization RMSNorm", g["--normalization"] == "RMSNorm", m.Family == Llama},
		{"--position-embedding-type learned_absolute", g["--position-embedding-type"] == "learned_absolute" || g["--position-embedding-type"] == "", m.learnedPositions()},
		{"--untie-embeddings-and-output-weights", g.has("--untie-embeddings-and-output-weights"), !m.Tied},
		{"--disable-bias-linear", g.has("--disable-bias-linear"), !m.AttnBias && !m.MLPBias},
	}
	for _, b := range bools {
		if b.got != b.want {
			return nil, fmt.Errorf("plan: megatron arguments: %s is %v, but the model %s (%s) says %v", b.what, b.got, m.Name, m.Family, b.want)
		}
	}
	var notes []string
	if v, ok := g["--vocab-size"]; ok && v != strconv.Itoa(m.Vocab) {
		notes = append(notes, fmt.Sprintf("--vocab-size %s: the model's vocabulary %d is costed", printable(v), m.Vocab))
	}
	if noDrop := g["--attention-dropout"] == "0" && g["--hidden-dropout"] == "0"; noDrop == m.Dropout {
		notes = append(notes, fmt.Sprintf("--attention-dropout/--hidden-dropout (Megatron's default 0.1 unless both are 0) disagree with the model %s (dropout=%v): the model's dropout masks are costed", m.Name, m.Dropout))
	}
	return notes, nil
}
