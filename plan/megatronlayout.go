package plan

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Megatron-Core's --pipeline-model-parallel-layout (core_v0.13.0 on;
// megatron/core/transformer/pipeline_parallel_layer_layout.py): the
// model's chunks in layer order, separated by '|', chunk c on pipeline rank
// c mod pp (so pp·vpp stages give vpp), each a string of E (the
// embedding), t (a transformer layer), m (an MTP layer) and L (the loss);
// "x*n" repeats a character and "(…)*n" a group, commas are cosmetic. The
// planner writes it for a model with experts or MLA whose split the older
// flags cannot state (an even split, --account-for-…, or first and last
// stage given), and reads it when given: the chunks must hold the
// planner's split (lighter chunks at the ends, the last first), the
// embedding first, MTP and the loss on the last chunk.

// megatronMoEVersion is the release the mapping of models with experts or
// MLA matches: core_v0.14.0 adds the layout, the EP overlap and DeepEP's
// SM count to core_v0.12.0's flags (plan/testdata/megatron-core_v0.14.0-args.txt
// lists the additions).
const megatronMoEVersion = "Megatron-LM core_v0.14.0"

// megatronVersionFor is the release the job's mapping matches.
func (j Job) megatronVersionFor() string {
	if j.Model.general() {
		return megatronMoEVersion
	}
	return megatronVersion
}

// megatronFSDPFlag is Megatron's switch for its FSDP (ZeRO-2/3):
// --use-custom-fsdp in core_v0.12.0, --use-megatron-fsdp in core_v0.14.0.
func (j Job) megatronFSDPFlag() string {
	if j.Model.general() {
		return "--use-megatron-fsdp"
	}
	return "--use-custom-fsdp"
}

// megatronLayout is the layout to write for p, or "" where the older flags
// state its split (or the model is dense, whose mapping is core_v0.12.0's).
func (j Job) megatronLayout(p Plan) string {
	L := j.Model.Layers
	if !j.Model.general() || p.PP == 1 || megatronSplit(L, p.PP, p.VPP) {
		return ""
	}
	counts := chunkLayers(L, p.PP*p.VPP)
	stages := make([]string, len(counts))
	for c, n := range counts {
		var s strings.Builder
		if c == 0 {
			s.WriteString("E")
		}
		if n > 0 {
			s.WriteString("t")
			if n > 1 {
				s.WriteString("*" + strconv.Itoa(n))
			}
		}
		if c == len(counts)-1 {
			s.WriteString(strings.Repeat("m", j.Model.MTP) + "L")
		}
		stages[c] = s.String()
	}
	var out strings.Builder
	for i := 0; i < len(stages); {
		n := 1
		for i+n < len(stages)-1 && stages[i+n] == stages[i] {
			n++
		}
		switch {
		case n >= 3:
			fmt.Fprintf(&out, "(%s|)*%d", stages[i], n)
		default:
			for k := 0; k < n; k++ {
				out.WriteString(stages[i] + "|")
			}
		}
		i += n
	}
	return strings.TrimSuffix(out.String(), "|")
}

// parseLayout unrolls a layout as Megatron does (parentheses first, then
// single characters) into its stages; the unrolled text is bounded.
func parseLayout(s string) ([]string, error) {
	const most = 1 << 20
	layoutGroup := regexp.MustCompile(`\(([^)]+)\)\*(\d+)`)
	layoutChar := regexp.MustCompile(`(.)\*(\d+)`)
	s = strings.ReplaceAll(s, ",", "")
	var err error
	unroll := func(re *regexp.Regexp, s string) string {
		return re.ReplaceAllStringFunc(s, func(x string) string {
			m := re.FindStringSubmatch(x)
			n, e := strconv.Atoi(m[2])
			if e != nil || n < 0 || len(m[1])*n > most {
				err = fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout: repeat %q is out of range (at most %d characters unrolled)", x, most)
				return ""
			}
			return strings.Repeat(m[1], n)
		})
	}
	s = unroll(layoutGroup, s)
	if err == nil && len(s) <= most {
		s = unroll(layoutChar, s)
	}
	if err != nil {
		return nil, err
	}
	if len(s) > most {
		return nil, fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout unrolls to more than %d characters", most)
	}
	stages := strings.Split(s, "|")
	for _, st := range stages {
		if i := strings.IndexFunc(st, func(r rune) bool { return !strings.ContainsRune("ELtm", r) }); i >= 0 {
			return nil, fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout: %q is not a layer (E, t, m, L)", st[i:i+1])
		}
	}
	return stages, nil
}

// megatronLayoutRead reads vpp and the split from the layout.
func (j Job) megatronLayoutRead(g megatronRead, p *Plan, notes *[]string) error {
	stages, err := parseLayout(g["--pipeline-model-parallel-layout"])
	if err != nil {
		return err
	}
	if len(stages)%p.PP != 0 {
		return fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout has %d stages, not a multiple of pp=%d", len(stages), p.PP)
	}
	p.VPP = len(stages) / p.PP
	if p.VPP > 1 {
		p.Schedule = Interleaved
	}
	L, C := j.Model.Layers, len(stages)
	want := chunkLayers(L, C)
	desc := func() string {
		s := make([]string, C)
		for c, n := range want {
			s[c] = strconv.Itoa(n)
		}
		return strings.Join(s, ", ")
	}
	for c, st := range stages {
		n := strings.Count(st, "t")
		ends := (c == 0) == strings.HasPrefix(st, "E") && strings.Count(st, "E") <= 1 &&
			(c == C-1) == strings.HasSuffix(st, "L") && strings.Count(st, "L") <= 1
		mtp := strings.Count(st, "m")
		if c < C-1 && mtp > 0 || c == C-1 && mtp != j.Model.MTP {
			return fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout: stage %d has %d MTP layers; the model's %d go on the last stage with the loss", c, mtp, j.Model.MTP)
		}
		if !ends || n != want[c] {
			return fmt.Errorf("plan: megatron arguments: --pipeline-model-parallel-layout: stage %d is %q; the planner splits %d layers over %d chunks as %s (lighter ends first), the embedding first and the loss last",
				c, st, L, C, desc())
		}
	}
	if g.has("--num-layers-per-virtual-pipeline-stage") || g.has("--decoder-first-pipeline-num-layers") || g.has("--decoder-last-pipeline-num-layers") {
		*notes = append(*notes, "--pipeline-model-parallel-layout is given: the other split flags are not read (Megatron rejects them together)")
	}
	return nil
}
