package plan

import (
	"strings"
	"testing"
)

// TestParseLayout unrolls layouts as Megatron-Core's parse_str_to_list
// does (its docstring's example among them).
func TestParseLayout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Ettt|(tt|)*29,m|L", append(append([]string{"Ettt"}, strings.Split(strings.Repeat("tt|", 29), "|")[:29]...), "m", "L")},
		{"Et*7|(t*8|)*5t*7|t*7mL", []string{"Ettttttt", "tttttttt", "tttttttt", "tttttttt", "tttttttt", "tttttttt", "ttttttt", "tttttttmL"}},
		{"E|t*12|L", []string{"E", "tttttttttttt", "L"}},
	} {
		got, err := parseLayout(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: %v, want %v", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"Et*4|x|L", `"x" is not a layer`},
		{"(t|)*99999999999", "out of range"},
		{"t*2000000", "out of range"},
	} {
		if _, err := parseLayout(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}

// TestMegatronLayoutRoundTrip: a split the older flags cannot state is
// written as a layout and read back; a layout with another split, MTP
// off the last stage, or a stage count pp does not divide is an error
// naming the planner's split.
func TestMegatronLayoutRoundTrip(t *testing.T) {
	j := job(t, "deepseek-v3", "dgx-h100", 1024, 4096, 8192)
	for _, s := range []string{"dp=32,tp=2,pp=8,cp=2,zero=1,sp=on,precision=fp8,ep=16",
		"dp=64,tp=2,pp=8,vpp=4,schedule=interleaved,zero=1,sp=on,precision=fp8,ep=64"} {
		p := mustParse(t, s)
		em, err := j.Emit(Megatron, p)
		if err != nil {
			t.Fatal(err)
		}
		if em.Plan != p || !strings.Contains(em.Text, "--pipeline-model-parallel-layout") {
			t.Fatalf("%s: emitted %s\n%s", s, em.Plan.Short(), em.Text)
		}
		im, err := j.Import(Megatron, em.Text, Fix{})
		if err != nil {
			t.Fatal(err)
		}
		if im.Plan != p {
			t.Errorf("%s: read back %s", s, im.Plan.Short())
		}
	}
	base := "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --context-parallel-size 2 --sequence-parallel " +
		"--expert-model-parallel-size 16 --num-layers 61 --mtp-num-layers 1 --pipeline-model-parallel-layout "
	for _, c := range []struct{ layout, want string }{
		{"'Et*8|(t*8|)*5t*7|t*6mL'", "the planner splits 61 layers over 8 chunks as 7, 8, 8, 8, 8, 8, 7, 7"},
		{"'Et*7|(t*8|)*5t*7m|t*7L'", "stage 6 has 1 MTP layers"},
		{"'Et*7|(t*8|)*5t*14mL'", "7 stages, not a multiple of pp=8"},
	} {
		if _, err := j.Import(Megatron, base+c.layout, Fix{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.layout, err, c.want)
		}
	}
}

// TestUnknownFrameworkKeys: a flag or key the framework does not have is
// an error naming the nearest one it has, not "not read".
func TestUnknownFrameworkKeys(t *testing.T) {
	j := job(t, "mixtral-8x7b", "dgx-h100", 64, 4096, 256)
	for _, c := range []struct {
		fw         Framework
		text, want string
	}{
		{Megatron, "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-paralel-size 8", "--expert-model-paralel-size is not an argument of Megatron-LM core_v0.12.0 nor Megatron-LM core_v0.14.0 (nearest: --expert-model-parallel-size)"},
		{Megatron, "--moe-router-top-k 2", "(nearest: --moe-router-topk)"},
		{Torchtitan, "[parallelism]\nexpert_parallel_degre = 8\n", "parallelism.expert_parallel_degre is not a key"},
		{DeepSpeed, `{"train_micro_batch_size_per_gpu": 1, "zero_optimisation": {"stage": 1}}`, "zero_optimisation is not a key"},
	} {
		_, err := j.Import(c.fw, c.text, Fix{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.fw, c.text, err, c.want)
		}
	}
	// A flag of core_v0.14.0 that the planner does not read is noted, not an error.
	im, err := j.Import(Megatron, "--expert-model-parallel-size 8 --moe-router-fusion", Fix{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(im.Notes, "\n"), "--moe-router-fusion: not read") {
		t.Errorf("notes %v", im.Notes)
	}
}
