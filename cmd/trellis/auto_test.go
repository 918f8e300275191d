package main

import (
	"errors"
	"github.com/spf13/cobra"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"trellis/plan"

	"trellis/launch"
	"trellis/train"
)

// A job naming no cluster file uses the profile `trellis profile --cache`
// kept, when there is one; one naming a file keeps it.
func TestUseCachedProfile(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	j := train.DefaultJob()
	useCachedProfile(&j)
	if j.Parallel.Cluster != "" {
		t.Fatalf("no cache, yet cluster %q", j.Parallel.Cluster)
	}
	p, err := cachedProfilePath()
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("name = \"x\"\n"), 0o644)
	useCachedProfile(&j)
	if j.Parallel.Cluster != p {
		t.Errorf("cluster %q, want the cached %q", j.Parallel.Cluster, p)
	}
	j.Parallel.Cluster = "mine.toml"
	useCachedProfile(&j)
	if j.Parallel.Cluster != "mine.toml" {
		t.Errorf("a named cluster file was replaced by %q", j.Parallel.Cluster)
	}
}

// parallel.plan=auto under a launcher of several processes is refused by
// name: each process would choose on its own measurements.
func TestAutoRefusedUnderLauncher(t *testing.T) {
	j := train.DefaultJob()
	j.Parallel.Plan = train.Auto
	err := choosePlan(&j, &launch.Env{WorldSize: 2, LocalWorldSize: 2, Source: "torchrun"})
	if err == nil || !strings.Contains(err.Error(), "parallel.plan=auto under a launcher of 2 processes") {
		t.Errorf("error %v", err)
	}
}

// trellis launch … -- trellis train starts this executable when no
// trellis is on PATH (a ./trellis or go run user's case).
func TestLaunchWorkerProgram(t *testing.T) {
	missing := func(string) (string, error) { return "", errors.New("not found") }
	found := func(p string) (string, error) { return "/usr/bin/" + p, nil }
	self := func() (string, error) { return "/home/u/trellis", nil }
	for _, c := range []struct {
		prog string
		look func(string) (string, error)
		want string
	}{{"trellis", missing, "/home/u/trellis"}, {"trellis", found, "trellis"}, {"./worker", missing, "./worker"}, {"python", missing, "python"}} {
		if got := workerProgram(c.prog, c.look, self); got != c.want {
			t.Errorf("%s: %s, want %s", c.prog, got, c.want)
		}
	}
}

// Every --model and --cluster in a command's help examples is a preset
// (or a file the example writes): `trellis profile --help` named
// gpt2-124m, which is none.
func TestHelpExamplesNamePresets(t *testing.T) {
	cmds := []*cobra.Command{newTrainCmd(), newSampleCmd(), newPlanCmd(), newLaunchCmd(), newBenchCmd(), newTraceCmd(), newExportCmd(), newProfileCmd(), newReportCmd()}
	for len(cmds) > 0 {
		c := cmds[0]
		cmds = append(cmds[1:], c.Commands()...)
		w := strings.Fields(c.Example)
		for i := 0; i+1 < len(w); i++ {
			v := strings.Trim(w[i+1], "`'\",")
			if strings.ContainsAny(v, "/.") || strings.HasPrefix(v, "-") || strings.ToUpper(v) == v {
				continue // a file, a flag, or a placeholder such as M
			}
			switch w[i] {
			case "--model":
				if _, err := plan.ModelPreset(v); err != nil {
					t.Errorf("%s --help: --model %s: %v", c.Name(), v, err)
				}
			case "--cluster":
				if _, err := plan.ClusterPreset(v); err != nil {
					t.Errorf("%s --help: --cluster %s: %v", c.Name(), v, err)
				}
			}
		}
	}
}

// The end of a run says what to do next: sample and export the
// checkpoint it wrote, report its metrics.
func TestRunEndsWithNextSteps(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--parallel", "dp=1", "--device-memory", "0", "--metrics", "m.jsonl", "--set", "checkpoint.dir=ck"}
	for _, s := range tinySets {
		args = append(args, "--set", s)
	}
	r := run(t, dir, args...)
	if r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	for _, want := range []string{"\nnext:\n", "trellis sample --checkpoint ck/", "trellis export --checkpoint ck/", "trellis report m.jsonl -o report.html"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the run's end lacks %q:\n%s", want, r.stdout)
		}
	}
	if n := nextSteps("", "", "", true, false); !strings.Contains(n, "--metrics run.jsonl") || strings.Contains(n, "sample") {
		t.Errorf("no checkpoint, no metrics: %q", n)
	}
	if n := nextSteps("ck/step-00000005", "", "", false, false); !strings.Contains(n, "trellis sample") || strings.Contains(n, "trellis export") {
		t.Errorf("a model without a Hugging Face form (shared experts, a sigmoid router) is offered an export: %q", n)
	}
	if n := nextSteps("ck/step-00000005", "", "", true, true); !strings.Contains(n, "trellis export --checkpoint ck/step-00000005 --out ck/step-00000005-hf --dropless") {
		t.Errorf("an MoE model with a capacity factor is not offered the dropless export: %q", n)
	}
}

// The docs quote one time for the default run (README's, which
// docs/BENCHMARKS.md's table repeats), and no "about a minute" for the
// whole test suite.
func TestDocsAgreeOnTimings(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	bench, err := os.ReadFile("../../docs/BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`The run below is ZeRO-3's \((\d+ min \d+ s)`)
	m := re.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README: no time for the default run")
	}
	for _, line := range strings.Split(string(bench), "\n") {
		if strings.HasPrefix(line, "| 2 | `trellis train`, no flags") && !strings.Contains(line, "| "+string(m[1])+" for the whole run") {
			t.Errorf("docs/BENCHMARKS.md says %q, the README %s", line, m[1])
		}
	}
	if strings.Contains(string(readme), "about a minute on 2 cores") {
		t.Error("README: the whole test suite does not take about a minute on 2 cores")
	}
}

// --from megatron takes Megatron's arguments as one quoted word (it
// starts with "--": it was taken for an unknown flag) and, when they
// state the shape, needs no --model.
func TestFromMegatronQuotedNoModel(t *testing.T) {
	args := "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 --num-layers 24 --hidden-size 2048 --num-attention-heads 16 " +
		"--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 512 --bf16 --vocab-size 50257 --attention-dropout 0 --hidden-dropout 0"
	r := run(t, t.TempDir(), "plan", "--cluster", "dgx-a100", "--devices", "64", "--from", "megatron", args)
	if r.err != nil || !strings.Contains(r.stdout, "read from megatron: dp=4,tp=8,pp=2") || strings.Contains(r.stdout, "dropout") {
		t.Errorf("quoted arguments, no --model: %v\n%s%s", r.err, r.stdout, r.stderr)
	}
	r = run(t, t.TempDir(), "plan", "--cluster", "dgx-a100", "--devices", "64", "--from", "megatron", "--", "--tensor-model-parallel-size", "8")
	if r.err == nil || !strings.Contains(r.stderr, "no --num-layers: give it, or the model with --model") {
		t.Errorf("no shape, no --model: %v\n%s", r.err, r.stderr)
	}
	if got := quotedArgs([]string{"plan", "--model", "gpt2", "--from", "megatron", "--a 1 --b 2", "--", "--c", "3"}); strings.Join(got, "|") != "plan|--model|gpt2|--from|megatron|--|--a 1 --b 2|--c|3" {
		t.Errorf("quotedArgs: %q", got)
	}
}

// The metrics file's first line carries the run's header (plan, model,
// size) and a sampled step its text, and the report shows them: it
// showed neither plan nor model nor samples.
func TestReportShowsHeaderAndSamples(t *testing.T) {
	dir := t.TempDir()
	args := []string{"train", "--parallel", "dp=2", "--device-memory", "0", "--metrics", "m.jsonl", "--set", "checkpoint.dir=", "--set", "train.sample_every=2"}
	for _, s := range tinySets {
		args = append(args, "--set", s)
	}
	if r := run(t, dir, args...); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "m.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !strings.Contains(lines[0], `"run":{"plan":"dp=2,`) || !strings.Contains(lines[0], `"model":"layers=2 hidden=32`) {
		t.Errorf("first metrics line has no header: %.300s", lines[0])
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, `"run":`) {
			t.Errorf("a later line repeats the header: %.200s", l)
		}
	}
	if !strings.Contains(lines[1], `"sample":"`) {
		t.Errorf("step 2's line has no sample: %.300s", lines[1])
	}
	if r := run(t, dir, "report", "m.jsonl", "-o", "r.html"); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	html, err := os.ReadFile(filepath.Join(dir, "r.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<th>plan</th><td>dp=2,", "<th>model</th><td>layers=2 hidden=32", `id="samples"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}
