package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --emit then --from through the command line, for every framework: the
// configuration read back is the plan written, and the explanation says
// it is the best plan the framework runs.
func TestPlanEmitFrom(t *testing.T) {
	dir := t.TempDir()
	job := []string{"--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "8"}
	size := []string{"--seq", "8192", "--global-batch", "64"}
	for _, fw := range []string{"megatron", "torchtitan", "deepspeed"} {
		args := append(append(append([]string{}, job...), size...), "--emit", fw, "--fix", "precision=bf16")
		out, err := runPlanArgs(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", fw, err, out)
		}
		var text, outside []string
		var written string
		for _, l := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(l, "# "); ok && written == "" && strings.Contains(rest, " for ") {
				written = strings.Fields(rest[strings.Index(rest, " for ")+5:])[0]
				written = strings.TrimSuffix(written, ":")
			}
			if rest, ok := strings.CutPrefix(l, "# not in the file"); ok {
				outside = append(outside, rest[strings.LastIndex(rest, ": ")+2:])
			} else if !strings.HasPrefix(l, "# ") {
				text = append(text, l)
			}
		}
		file := filepath.Join(dir, fw+".cfg")
		if err := os.WriteFile(file, []byte(strings.Join(text, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		from := append(append([]string{}, job...), "--from", fw, file)
		if fw == "deepspeed" {
			from = append(from, "--seq", "8192", "--fix", strings.Join(outside, ","))
		}
		out, err = runPlanArgs(t, from...)
		if err != nil || !strings.Contains(out, "fits:") || !strings.Contains(out, "read from "+fw+": "+written+"\n") {
			t.Errorf("--from %s: %v\n%s", fw, err, out)
		}
	}
}

// --from megatron takes the arguments after "--"; a different model shape
// or a job that disagrees with the flags is an error naming them.
func TestPlanFromMegatron(t *testing.T) {
	base := []string{"--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "1024", "--from", "megatron", "--"}
	args := strings.Fields(`--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 --num-layers 96
		--hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048
		--micro-batch-size 1 --global-batch-size 1536 --fp16 --recompute-granularity full --recompute-method uniform
		--recompute-num-layers 1 --attention-backend unfused --lr 6e-5 --train-iters 1000`)
	out, err := runPlanArgs(t, append(base, args...)...)
	if err != nil {
		t.Fatal(err, out)
	}
	for _, w := range []string{"read from megatron: dp=16,tp=8,pp=8", "--lr: not read", "fits:", "step", "what to change"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	bad := append([]string{}, base...)
	for _, a := range args {
		bad = append(bad, strings.Replace(a, "12288", "4096", 1))
	}
	if _, err := runPlanArgs(t, bad...); err == nil || !strings.Contains(err.Error(), "--hidden-size 4096, but the model gpt3-175b has 12288") {
		t.Errorf("wrong shape: %v", err)
	}
	if _, err := runPlanArgs(t, append(append([]string{"--seq", "1024"}, base...), args...)...); err == nil || !strings.Contains(err.Error(), "--seq=1024, but the megatron configuration says 2048") {
		t.Errorf("--seq disagreeing with --seq-length: %v", err)
	}
}

// --emit with --json and with --explain, and --from with --json.
func TestPlanEmitJSONAndExplain(t *testing.T) {
	base := []string{"--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "64", "--seq", "8192", "--global-batch", "128"}
	out, err := runPlanArgs(t, append(base, "--explain", "dp=2,tp=4,pp=8,sp=on,zero=1,schedule=zb-h1", "--emit", "megatron", "--json")...)
	if err != nil {
		t.Fatal(err, out)
	}
	var em struct {
		Asked, Plan, Text string
		Changes           []string
	}
	if err := json.Unmarshal([]byte(out), &em); err != nil {
		t.Fatal(err, out)
	}
	if !strings.Contains(em.Asked, "schedule=zb-h1") || !strings.Contains(em.Plan, "schedule=1f1b") ||
		len(em.Changes) == 0 || !strings.Contains(em.Changes[0], "no zb-h1 schedule") || !strings.Contains(em.Text, "--pipeline-model-parallel-size 8") {
		t.Errorf("emit JSON %+v", em)
	}
	file := filepath.Join(t.TempDir(), "args")
	if err := os.WriteFile(file, []byte(em.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runPlanArgs(t, "--model", "llama3-70b", "--cluster", "dgx-h100", "--devices", "64", "--from", "megatron", file, "--json")
	var from struct {
		Plan     string
		Valid    bool
		Fits     bool
		BestText string `json:"best_text"`
	}
	if err != nil || json.Unmarshal([]byte(out), &from) != nil || from.Plan != em.Plan || !from.Valid || from.BestText == "" {
		t.Errorf("--from --json: %v %+v\n%s", err, from, out)
	}
}
