package plan

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// fwCase is a job and a plan to write for a framework and read back.
type fwCase struct {
	name string
	job  Job
	plan Plan
}

// frameworkCases are the top plans of the held-out set and of the README's
// and `trellis plan --help`'s examples, plus plans that exercise what some
// framework cannot express (an uneven interleaved split, zb-h1, GPipe,
// ZeRO-2, a rank order of its own, no flash).
func frameworkCases(t *testing.T) []fwCase {
	t.Helper()
	var cs []fwCase
	for _, h := range heldOutSet() {
		_, e := h.predict(t)
		cs = append(cs, fwCase{h.source + " " + h.model, h.job(t), e.Plan})
	}
	return append(cs, exampleCases(t)...)
}

// exampleCases are frameworkCases without the held-out set.
func exampleCases(t *testing.T) []fwCase {
	t.Helper()
	var cs []fwCase
	readme := []struct {
		model, cluster      string
		devices, seq, batch int
		fix                 string
	}{
		{"llama3-70b", "dgx-h100", 512, 8192, 512, ""},
		{"gpt3-175b", "dgx-a100", 1024, 2048, 1536, "dp=32,tp=8,pp=4,mbs=1,recompute=full,precision=bf16,flash=off"},
		{"llama3-70b", "dgx-h100", 64, 8192, 512, ""},
		{"gpt3-175b", "dgx-a100", 1024, 2048, 1536, "tp=8,pp=8"},
		{"llama3-8b", "dgx-h100", 8, 8192, 64, ""},
	}
	for _, r := range readme {
		j := job(t, r.model, r.cluster, r.devices, r.seq, r.batch)
		f, err := ParseFix(r.fix)
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Search(Options{Fix: f, Top: 1})
		if err != nil || len(res.Plans) == 0 {
			t.Fatalf("%s: %v %v", r.model, err, res.Rejected)
		}
		cs = append(cs, fwCase{"README " + r.model, j, res.Plans[0].Plan})
	}
	hard := job(t, "llama3-70b", "dgx-h100", 64, 8192, 128)
	for _, s := range []string{
		"dp=2,tp=4,pp=8,vpp=3,schedule=interleaved,sp=on,zero=1", // 80 layers over 24 chunks: uneven within ranks
		"dp=2,tp=4,pp=8,sp=on,zero=1,schedule=zb-h1",
		"dp=2,tp=4,pp=8,sp=on,zero=1,schedule=gpipe,recompute=full",
		"dp=4,tp=8,pp=2,sp=on,zero=2,order=tp-dp-cp-pp",
		"dp=8,tp=8,zero=1,sp=off,flash=off,recompute=selective,precision=fp16",
		"dp=4,tp=4,pp=2,cp=2,zero=3,sp=on,mbs=2,precision=fp8",
	} {
		cs = append(cs, fwCase{"hard " + s, hard, mustParse(t, s)})
	}
	return append(cs, moeCases(t)...)
}

// moeCases are plans of models with experts: the held-out rows' and plans
// every framework must change (DualPipe, DualPipeV, etp = tp, an ep
// DeepSpeed cannot carve out of dp).
func moeCases(t *testing.T) []fwCase {
	t.Helper()
	var cs []fwCase
	for _, h := range heldOutMoE() {
		if f, err := ParseFix(h.fix); err == nil && f.Pinned("mbs") {
			cs = append(cs, fwCase{"moe " + h.model, h.job(t), f.Value()})
		}
	}
	ds := job(t, "deepseek-v3", "dgx-h100", 1024, 4096, 8192)
	mx := job(t, "mixtral-8x7b", "dgx-h100", 64, 4096, 256)
	for _, c := range []struct {
		j Job
		p string
	}{
		{ds, "dp=64,tp=1,pp=16,zero=1,precision=fp8,ep=64,schedule=dualpipe"},
		{ds, "dp=64,tp=1,pp=16,zero=1,precision=fp8,ep=32,schedule=dualpipev,recompute=full"},
		{ds, "dp=32,tp=4,pp=8,zero=1,sp=on,precision=fp8,ep=8,etp=4,recompute=full"},
		{mx, "dp=32,tp=2,zero=3,sp=on,ep=8,etp=2"},
		{mx, "dp=16,tp=4,zero=1,sp=on,ep=8"},
	} {
		cs = append(cs, fwCase{"moe " + c.j.Model.Name + " " + c.p, c.j, mustParse(t, c.p)})
	}
	return cs
}

// TestFrameworkRoundTrip: for every case and framework, writing the plan
// and reading it back gives the plan written and the same prediction; the
// plan written is the plan asked for unless the emission says what
// changed and why.
func TestFrameworkRoundTrip(t *testing.T) {
	cases := frameworkCases(t)
	for _, fw := range Frameworks() {
		t.Run(string(fw), func(t *testing.T) {
			changed := 0
			for _, c := range cases {
				em, err := c.job.Emit(fw, c.plan)
				if err != nil {
					t.Errorf("%s: emit %s: %v", c.name, c.plan.Short(), err)
					continue
				}
				if (em.Plan != c.plan) != (len(em.Changes) > 0) {
					t.Errorf("%s: wrote %s for %s with changes %q", c.name, em.Plan.Short(), c.plan.Short(), em.Changes)
				}
				if em.Plan != c.plan {
					changed++
				}
				im, err := c.job.Import(fw, em.Text, outsideFix(t, em))
				if err != nil {
					t.Errorf("%s: import of\n%s\n%v", c.name, em.Text, err)
					continue
				}
				if im.Plan != em.Plan || im.GlobalBatch != c.job.GlobalBatch || (fw != DeepSpeed && im.Seq != c.job.Seq) {
					t.Errorf("%s: wrote %s, read %s (batch %d, seq %d)\n%s", c.name, em.Plan, im.Plan, im.GlobalBatch, im.Seq, em.Text)
					continue
				}
				a, errA := c.job.Evaluate(em.Plan)
				b, errB := c.job.Evaluate(im.Plan)
				if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
					t.Errorf("%s: predictions differ: %v %v", c.name, errA, errB)
				}
			}
			t.Logf("%d cases, %d written as the nearest plan %s can run", len(cases), changed, fw)
		})
	}
}

// outsideFix pins the keys a configuration does not carry, as a user
// states them on the framework's command line.
func outsideFix(t *testing.T, em Emission) Fix {
	t.Helper()
	f, err := ParseFix(strings.Join(em.Outside, ","))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMegatronFlagsExist holds every flag the planner writes or reads to
// the argument list of the Megatron-LM version named.
func TestMegatronFlagsExist(t *testing.T) {
	data, err := os.ReadFile("testdata/megatron-core_v0.12.0-args.txt")
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "--") {
			exists[strings.TrimSpace(l)] = true
		}
	}
	if !strings.Contains(megatronVersion, "core_v0.12.0") || len(exists) < 400 {
		t.Fatalf("version %q, %d flags in the list", megatronVersion, len(exists))
	}
	// Models with experts or MLA map to core_v0.14.0: its additions too.
	data, err = os.ReadFile("testdata/megatron-core_v0.14.0-args.txt")
	if err != nil {
		t.Fatal(err)
	}
	added := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "--") {
			added[strings.TrimSpace(l)] = true
		}
	}
	for _, r := range megatronTable() {
		if !exists[r.Name] && !added[r.Name] {
			t.Errorf("table flag %s is not a %s nor %s argument", r.Name, megatronVersion, megatronMoEVersion)
		}
	}
	for _, c := range exampleCases(t) {
		em, err := c.job.Emit(Megatron, c.plan)
		if err != nil {
			t.Fatal(err)
		}
		if em.Version != c.job.megatronVersionFor() {
			t.Errorf("%s: version %s", c.name, em.Version)
		}
		toks, _ := splitArgs(em.Text)
		for _, tok := range toks {
			if strings.HasPrefix(tok, "--") && !exists[tok] && !(c.job.Model.general() && added[tok]) {
				t.Errorf("%s: wrote %s, not a %s argument", c.name, tok, em.Version)
			}
		}
	}
}

// TestMegatronPublishedScript reads the arguments of Megatron-LM's own
// GPT-3 175B example (examples/gpt3/train_gpt3_175b_distributed.sh at
// core_v0.12.0, on 1024 GPUs) and gets the plan they state, predicted as
// the planner predicts that plan pinned.
func TestMegatronPublishedScript(t *testing.T) {
	const script = `--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \
	--max-position-embeddings 2048 --attention-backend auto # Can use (flash/fused/unfused/local)
	--micro-batch-size 1 --global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000
	--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 --fp16
	--lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 430000
	--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16`
	j := job(t, "gpt3-175b", "dgx-a100", 1024, 2048, 1536)
	im, err := j.Import(Megatron, script, Fix{})
	if err != nil {
		t.Fatal(err)
	}
	want := mustParse(t, "dp=8,tp=8,pp=16,mbs=1,precision=fp16,flash=on,recompute=none,zero=0")
	if im.Plan != want || im.Seq != 2048 || im.GlobalBatch != 1536 {
		t.Fatalf("read %s (seq %d, batch %d), want %s", im.Plan, im.Seq, im.GlobalBatch, want)
	}
	a, _ := j.Evaluate(im.Plan)
	f, _ := ParseFix(want.String())
	res, err := j.Search(Options{Fix: f, Top: 1})
	if err != nil || len(res.Plans) != 1 || res.Plans[0].Time.Step != a.Time.Step || res.Plans[0].Memory != a.Memory {
		t.Errorf("pinned search %v, %v; imported %g s", err, res.Plans, a.Time.Step)
	}
}
