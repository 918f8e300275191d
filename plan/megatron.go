package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// megatronVersion is the Megatron-LM release the mapping matches: the
// flags of megatron/training/arguments.py at tag core_v0.12.0 (their list
// is plan/testdata/megatron-core_v0.12.0-args.txt, and a test holds every
// flag written here to it). Semantics from the same tag: the uneven split
// of megatron/core/transformer/transformer_block.py (first and last stage
// given, the rest even) and the rank order "tp-cp-ep-dp-pp" of
// megatron/core/parallel_state.py (--use-tp-pp-dp-mapping: tp-cp-ep-pp-dp).
const megatronVersion = "Megatron-LM core_v0.12.0"

// megatronTable maps each Megatron-LM argument the planner writes or reads
// to what it carries. Every other argument is read as "no effect on the
// plan's cost" and listed in the notes.
func megatronTable() []fwArg {
	rows := []fwArg{
		{"--tensor-model-parallel-size", "tp"},
		{"--pipeline-model-parallel-size", "pp"},
		{"--context-parallel-size", "cp"},
		{"--num-layers-per-virtual-pipeline-stage", "vpp (layers per model chunk = layers/(pp·vpp)); schedule=interleaved"},
		{"--num-virtual-stages-per-pipeline-rank", "vpp; schedule=interleaved"},
		{"--decoder-first-pipeline-num-layers", "the uneven split: layers on the first stage"},
		{"--decoder-last-pipeline-num-layers", "the uneven split: layers on the last stage"},
		{"--account-for-embedding-in-pipeline-split", "the split: the embedding counts as a layer of the first chunk"},
		{"--account-for-loss-in-pipeline-split", "the split: the loss counts as a layer of the last chunk"},
		{"--overlap-grad-reduce", "what the cost model assumes: gradient reduction overlapped with the backward"},
		{"--overlap-param-gather", "what the cost model assumes (zero=1): the parameter all-gather overlapped with the next forward"},
		{"--no-overlap-p2p-communication", "against what the cost model assumes for interleaved pipelines (asynchronous transfers)"},
		{"--sequence-parallel", "sp=on"},
		{"--tp-comm-overlap", "the cluster's tp_comm_overlap (a property of the stack, not of the plan)"},
		{"--use-distributed-optimizer", "zero=1 (optimizer states sharded over dp·cp)"},
		{"--use-custom-fsdp", "zero from --data-parallel-sharding-strategy"},
		{"--data-parallel-sharding-strategy", "zero: no_shard 0, optim 1, optim_grads 2, optim_grads_params 3"},
		{"--use-tp-pp-dp-mapping", "order=tp-cp-pp-dp (default tp-cp-dp-pp)"},
		{"--recompute-granularity", "recompute: full or selective"},
		{"--recompute-method", "recompute=full: uniform (with --recompute-num-layers 1: every layer's input kept)"},
		{"--recompute-num-layers", "recompute=full: layers per recomputed chunk (1)"},
		{"--micro-batch-size", "mbs"},
		{"--global-batch-size", "global batch"},
		{"--bf16", "precision=bf16"},
		{"--fp16", "precision=fp16"},
		{"--fp8-format", "precision=fp8 (hybrid: e4m3 forward, e5m2 backward)"},
		{"--attention-backend", "flash: flash, fused, auto on; unfused, local off"},
		{"--use-flash-attn", "flash=on"},
		{"--num-layers", "model.layers"},
		{"--hidden-size", "model.hidden"},
		{"--num-attention-heads", "model.heads"},
		{"--group-query-attention", "model.kv_heads from --num-query-groups"},
		{"--num-query-groups", "model.kv_heads"},
		{"--kv-channels", "model.head_dim"},
		{"--ffn-hidden-size", "model.ffn"},
		{"--seq-length", "seq"},
		{"--max-position-embeddings", "model.max_seq"},
		{"--swiglu", "model family llama (gated MLP)"},
		{"--normalization", "RMSNorm: family llama; LayerNorm: gpt"},
		{"--position-embedding-type", "learned_absolute: gpt; rope: llama or gpt with relative positions"},
		{"--untie-embeddings-and-output-weights", "model.tied=false"},
		{"--disable-bias-linear", "model without biases"},
		{"--attention-dropout", "model.dropout (0: none)"},
		{"--hidden-dropout", "model.dropout (0: none)"},
		{"--vocab-size", "model.vocab (before Megatron pads it)"},
	}
	return append(rows, megatronMoETable()...)
}

// megatronSwitches are the table's flags that take no value.
func megatronSwitch(flag string) bool {
	switch flag {
	case "--sequence-parallel", "--tp-comm-overlap", "--use-distributed-optimizer", "--use-custom-fsdp",
		"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
		"--overlap-grad-reduce", "--overlap-param-gather", "--no-overlap-p2p-communication",
		"--use-tp-pp-dp-mapping", "--bf16", "--fp16", "--use-flash-attn", "--group-query-attention",
		"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear":
		return true
	}
	return megatronMoESwitch(flag)
}

// megatronRules are what Megatron-LM cannot run: GPipe and zb-h1 (its
// pipeline schedules are 1F1B and interleaved 1F1B), rank orders other
// than its two, and a layer split other than even or "first and last
// stage given, the middle even" (one chunk per rank).
func megatronRules() []fwRule {
	return []fwRule{
		scheduleRule("Megatron-LM", OneFOneB, Interleaved),
		orderRule("Megatron-LM", "tp-cp-dp-pp", "tp-cp-pp-dp"),
		func(j Job, p Plan) ([]Plan, string) {
			if megatronSplit(j.Model.Layers, p.PP, p.VPP) || j.Model.general() { // core_v0.14.0's layout states any split
				return nil, ""
			}
			return splitAlternatives(j, p, megatronSplit), fmt.Sprintf("Megatron-LM cannot split %d layers over pp=%d × vpp=%d chunks as Trellis does (uneven chunks within a rank)", j.Model.Layers, p.PP, p.VPP)
		},
	}
}

// megatronSplit reports a split Megatron-LM expresses: even over pp·vpp
// chunks; or even once the loss (and the embedding) count as a layer of
// the last (and first) chunk, which is the planner's split of L over C
// chunks when C divides L+1 (L+2); or with one chunk per rank the middle
// ranks equal (first and last stage given).
func megatronSplit(L, pp, vpp int) bool {
	if pp == 1 || megatronAccount(L, pp*vpp) >= 0 {
		return true
	}
	if vpp > 1 {
		return false
	}
	pt, ok := newPartition(L, pp, 1)
	if !ok {
		return false
	}
	for k := 2; k < pp-1; k++ {
		if pt.count(k) != pt.count(1) {
			return false
		}
	}
	return true
}

// megatronAccount is how many of the embedding and the loss must count
// as layers for C chunks to split L layers evenly (0, 1: the loss, 2:
// both), or -1.
func megatronAccount(L, C int) int {
	for k := 0; k <= 2; k++ {
		if (L+k)%C == 0 && (L+k)/C > 1 || (k == 0 && L%C == 0) {
			return k
		}
	}
	return -1
}

// megatronArgs writes p as Megatron-LM arguments, one per line.
func (j Job) megatronArgs(p Plan) string {
	var a args
	m, L := j.Model, j.Model.Layers
	a.add("--tensor-model-parallel-size", p.TP)
	a.add("--pipeline-model-parallel-size", p.PP)
	a.add("--context-parallel-size", p.CP)
	k := -1
	if p.PP > 1 {
		k = megatronAccount(L, p.PP*p.VPP)
	}
	layout := j.megatronLayout(p) // megatronlayout.go
	a.flag("--account-for-embedding-in-pipeline-split", k == 2 && layout == "")
	a.flag("--account-for-loss-in-pipeline-split", k >= 1 && layout == "")
	if layout != "" {
		a.add("--pipeline-model-parallel-layout", "'"+layout+"'") // '|' and '*': quoted for the shell
	} else if p.Schedule == Interleaved {
		a.add("--num-layers-per-virtual-pipeline-stage", (L+k)/(p.PP*p.VPP))
	} else if p.PP > 1 && k < 0 {
		pt, _ := newPartition(L, p.PP, 1)
		a.add("--decoder-first-pipeline-num-layers", pt.count(0))
		a.add("--decoder-last-pipeline-num-layers", pt.count(p.PP-1))
	}
	a.flag("--sequence-parallel", p.SP)
	a.flag("--tp-comm-overlap", p.SP && p.TP > 1 && j.Cluster.TPCommOverlap)
	switch p.ZeRO {
	case 1:
		a.flag("--use-distributed-optimizer", true)
	case 2, 3:
		a.flag(j.megatronFSDPFlag(), true)
		a.add("--data-parallel-sharding-strategy", map[int]string{2: "optim_grads", 3: "optim_grads_params"}[p.ZeRO])
	}
	a.flag("--use-tp-pp-dp-mapping", p.Order == "tp-cp-pp-dp")
	a.flag("--overlap-grad-reduce", p.ZeRO <= 1 && p.DP*p.CP > 1)
	a.flag("--overlap-param-gather", p.ZeRO == 1 && p.DP*p.CP > 1)
	switch p.Recompute {
	case RecomputeFull:
		a.add("--recompute-granularity", "full")
		a.add("--recompute-method", "uniform")
		a.add("--recompute-num-layers", 1)
	case RecomputeSelective:
		a.add("--recompute-granularity", "selective")
	}
	a.add("--micro-batch-size", p.MBS)
	a.add("--global-batch-size", j.GlobalBatch)
	a.flag("--bf16", p.Precision == BF16 || p.Precision == FP8)
	a.flag("--fp16", p.Precision == FP16)
	if p.Precision == FP8 {
		a.add("--fp8-format", "hybrid")
	}
	a.add("--attention-backend", map[bool]string{true: "flash", false: "unfused"}[p.Flash])
	a.add("--num-layers", L)
	a.add("--hidden-size", m.Hidden)
	a.add("--num-attention-heads", m.Heads)
	if m.KVHeads != m.Heads {
		a.flag("--group-query-attention", true)
		a.add("--num-query-groups", m.KVHeads)
	}
	if m.HeadDim > 0 && m.HeadDim*m.Heads != m.Hidden {
		a.add("--kv-channels", m.HeadDim)
	}
	a.add("--ffn-hidden-size", m.FFN)
	a.add("--seq-length", j.Seq)
	a.add("--max-position-embeddings", max(m.MaxSeq, j.Seq))
	a.flag("--swiglu", m.gated())
	a.add("--normalization", map[bool]string{true: "RMSNorm", false: "LayerNorm"}[m.Family == Llama])
	a.add("--position-embedding-type", map[bool]string{true: "learned_absolute", false: "rope"}[m.learnedPositions()])
	a.flag("--untie-embeddings-and-output-weights", !m.Tied)
	a.flag("--disable-bias-linear", !m.AttnBias && !m.MLPBias)
	if !m.Dropout {
		a.add("--attention-dropout", 0)
		a.add("--hidden-dropout", 0)
	}
	a.add("--vocab-size", m.Vocab)
	j.megatronMoEArgs(&a, p)
	return a.text()
}

// args collects command-line arguments.
type args struct{ lines []string }

func (a *args) add(flag string, v any) { a.lines = append(a.lines, fmt.Sprintf("%s %v", flag, v)) }

func (a *args) flag(flag string, on bool) {
	if on {
		a.lines = append(a.lines, flag)
	}
}

func (a *args) text() string { return strings.Join(a.lines, " \\\n") + "\n" }

// megatronRead is the state of reading Megatron-LM arguments: every flag
// given, by name, with its value ("" for a switch).
type megatronRead map[string]string

// readMegatron splits the arguments into flags and values. A flag of the
// table that takes a value must have one; other flags are kept with the
// value that follows them, if any, and noted as not read.
func readMegatron(text string) (megatronRead, []string, error) {
	toks, err := splitArgs(text)
	if err != nil {
		return nil, nil, err
	}
	known := map[string]bool{}
	for _, r := range megatronTable() {
		known[r.Name] = true
	}
	got := megatronRead{}
	var notes []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !strings.HasPrefix(t, "--") {
			return nil, nil, fmt.Errorf("plan: megatron arguments: %q is not a --flag", t)
		}
		name, val, hasVal := strings.Cut(t, "=")
		sw := megatronSwitch(name)
		if !hasVal && !sw && i+1 < len(toks) && !strings.HasPrefix(toks[i+1], "--") {
			val, hasVal = toks[i+1], true
			i++
		}
		switch {
		case !known[name]:
			if err := megatronArgExists(name); err != nil {
				return nil, nil, err
			}
			for ; i+1 < len(toks) && !strings.HasPrefix(toks[i+1], "--"); i++ {
			} // an argument of its own may take several values (--rampup-batch-size 16 16 5859375)
			notes = append(notes, printable(name)+": not read (no effect on the plan's cost in the planner's model)")
			continue
		case sw && hasVal:
			return nil, nil, fmt.Errorf("plan: megatron arguments: %s takes no value (got %q)", name, val)
		case !sw && !hasVal:
			return nil, nil, fmt.Errorf("plan: megatron arguments: %s needs a value", name)
		}
		if _, dup := got[name]; dup {
			return nil, nil, fmt.Errorf("plan: megatron arguments: %s given twice", name)
		}
		got[name] = val
	}
	return got, notes, nil
}

// int reads an integer flag (def when absent).
func (g megatronRead) int(flag string, def int) (int, error) {
	v, ok := g[flag]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("plan: megatron arguments: %s %q: want a non-negative integer", flag, v)
	}
	return n, nil
}

func (g megatronRead) has(flag string) bool { _, ok := g[flag]; return ok }
