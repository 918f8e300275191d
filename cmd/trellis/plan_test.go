package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func runPlanArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	c := newPlanCmd()
	var out bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&out)
	c.SetArgs(args)
	err := c.Execute()
	return out.String(), err
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// The JSON is the issue's: model.params, plans[].{plan, memory, time,
// tflops_per_device, hw_tflops_per_device, mfu, hfu, tokens_per_s},
// evaluated, rejected; bytes and seconds.
func TestPlanJSON(t *testing.T) {
	out, err := runPlanArgs(t, "--model", "llama3-8b", "--cluster", "dgx-h100", "--devices", "16",
		"--seq", "8192", "--global-batch", "64", "--top", "2", "--json")
	if err != nil {
		t.Fatal(err, out)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err, out)
	}
	if got := keys(r); got != "costed,evaluated,fit,model,plans,rejected" {
		t.Fatalf("top-level keys %s", got)
	}
	if p := r["model"].(map[string]any)["params"].(float64); p != 8030261248 {
		t.Errorf("model.params = %v", p)
	}
	plans := r["plans"].([]any)
	if len(plans) != 2 {
		t.Fatalf("%d plans", len(plans))
	}
	p0 := plans[0].(map[string]any)
	for field, want := range map[string]string{
		"":       "engine_runs,hfu,hw_tflops_per_device,memory,mfu,plan,plan_string,tflops_per_device,time,tokens_per_s,variants",
		"plan":   "cp,dp,flash,mbs,order,pp,precision,recompute,schedule,sp,tp,vpp,zero",
		"memory": "act,budget,grad,optim,other,param,total",
		"time":   "bubble,comm_exposed,compute,misc,step",
	} {
		m := p0
		if field != "" {
			m = p0[field].(map[string]any)
		}
		if got := keys(m); got != want {
			t.Errorf("plans[0].%s keys = %s, want %s", field, got, want)
		}
	}
	mem := p0["memory"].(map[string]any)
	if mem["total"].(float64) > mem["budget"].(float64) || mem["budget"].(float64) < 80e9 {
		t.Errorf("memory %v", mem)
	}
	if r["evaluated"].(float64) < 100 {
		t.Errorf("evaluated %v", r["evaluated"])
	}
}

func TestPlanTableAndExplain(t *testing.T) {
	out, err := runPlanArgs(t, "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "64",
		"--seq", "2048", "--global-batch", "64", "--fix", "tp=8,pp=8", "--top", "3")
	if err != nil {
		t.Fatal(err, out)
	}
	for _, w := range []string{"MFU", "tp=8,pp=8", "considered"} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	out, err = runPlanArgs(t, "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "64",
		"--seq", "2048", "--global-batch", "64", "--explain", "dp=8,tp=8,recompute=none,flash=off")
	if err != nil {
		t.Fatal(err, out)
	}
	for _, w := range []string{"rejected: needs", "GiB >", "optimizer", "versus the best plan"} {
		if !strings.Contains(out, w) {
			t.Errorf("explain lacks %q:\n%s", w, out)
		}
	}
	out, err = runPlanArgs(t, "--model", "gpt3-175b", "--cluster", "dgx-a100", "--devices", "64",
		"--seq", "2048", "--global-batch", "64", "--explain", "dp=8,tp=8", "--json")
	if err != nil {
		t.Fatal(err, out)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil || r["fits"] != false || r["valid"] != true {
		t.Errorf("explain JSON %v (%v)", r, err)
	}
}

func TestPlanFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfg, []byte(`{"model_type":"gpt2","n_embd":768,"n_layer":12,"n_head":12,
		"n_positions":1024,"vocab_size":50257}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runPlanArgs(t, "--model", cfg, "--cluster", "../../plan/testdata/cpu-host.toml",
		"--devices", "2", "--seq", "256", "--global-batch", "8", "--json", "--top", "1")
	if err != nil {
		t.Fatal(err, out)
	}
	var r struct {
		Model struct{ Params int64 }
		Plans []struct {
			Memory struct{ Budget int64 }
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Model.Params != 124439808 || len(r.Plans) != 1 || r.Plans[0].Memory.Budget != 11<<30 {
		t.Errorf("got %+v", r)
	}
}

func TestPlanErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "dgx-a100", "--seq", "2048", "--global-batch", "8"}, "--model is required"},
		{[]string{"--model", "gpt2", "--cluster", "dgx-a100", "--global-batch", "8"}, "--seq is required"},
		{[]string{"--model", "gpt2", "--cluster", "dgx-a100", "--seq", "512"}, "--global-batch is required"},
		{[]string{"--model", "nope", "--cluster", "dgx-a100", "--seq", "512", "--global-batch", "8"}, `no model preset "nope"`},
		{[]string{"--model", "gpt2", "--cluster", "dgx-b9", "--seq", "512", "--global-batch", "8"}, `no cluster preset "dgx-b9"`},
		{[]string{"--model", "gpt2", "--cluster", "dgx-a100", "--seq", "512", "--global-batch", "8", "--fix", "tq=2"}, `unknown key "tq"`},
		{[]string{"--model", "gpt2", "--cluster", "dgx-a100", "--seq", "512", "--global-batch", "8", "--explain", "dp=x"}, `dp="x"`},
	} {
		_, err := runPlanArgs(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// A held-out row of docs/PLANNER.md end to end: BLOOM-176B's 70 layers over
// 12 stages (5, 6 × 10, 5) on Jean Zay's cluster file, ~150 TFLOP/s per GPU
// published (hardware FLOPs, recomputation counted).
func TestPlanHeldOutBLOOM(t *testing.T) {
	args := []string{"--model", "bloom-176b", "--cluster", "../../plan/testdata/jean-zay-a100.toml", "--devices", "384",
		"--seq", "2048", "--global-batch", "2048", "--fix",
		"dp=8,tp=4,pp=12,cp=1,zero=1,sp=off,mbs=2,schedule=1f1b,recompute=full,precision=bf16,flash=off", "--top", "1"}
	out, err := runPlanArgs(t, append(args, "--json")...)
	if err != nil {
		t.Fatal(err, out)
	}
	var r struct {
		Plans []struct {
			HW float64 `json:"hw_tflops_per_device"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Plans) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	if hw := r.Plans[0].HW; hw < 150*0.92 || hw > 150*1.08 {
		t.Errorf("BLOOM: %.1f hardware TFLOP/s per GPU, published ~150", hw)
	}
	out, err = runPlanArgs(t, append(args[:len(args)-4], "--explain",
		"dp=8,tp=4,pp=12,zero=1,mbs=2,recompute=full,flash=off")...)
	if err != nil || !strings.Contains(out, "70 layers over 12 stages: 5, 6 × 10, 5") {
		t.Errorf("explain (%v) lacks the uneven split:\n%s", err, out)
	}
}

// Exit status: a search that finds a plan succeeds; one that finds none
// fails with why and what would make a plan fit (table and JSON alike);
// bad flag values fail naming the flag, the value and the rule.
func TestPlanExitCodes(t *testing.T) {
	base := []string{"--model", "llama3-8b", "--cluster", "dgx-h100", "--seq", "8192", "--global-batch", "64"}
	for _, c := range []struct {
		args []string
		ok   bool
		want []string
	}{
		{[]string{"--devices", "8"}, true, []string{"considered"}},
		{[]string{"--devices", "8", "--fix", "dp=16"}, false, []string{"16·1·1·1 = 16, but the job has 8 devices", "--fix"}},
		{[]string{"--devices", "1"}, false, []string{"closest:", "at least", "on 2 devices"}},
		{[]string{"--devices", "1", "--json"}, false, []string{`"advice"`, `"plans": []`}},
	} {
		out, err := runPlanArgs(t, append(append([]string{}, base...), c.args...)...)
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v, want ok=%v\n%s", c.args, err, c.ok, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, w, out)
			}
		}
	}
	for flag, want := range map[string]string{
		"--seq=-5":          "--seq=-5: must be a positive number of tokens",
		"--top=0":           "--top=0: must be at least 1",
		"--global-batch=-1": "--global-batch=-1: must be a positive",
		"--devices=-2":      "--devices=-2: must be positive",
	} {
		args := append(append([]string{}, base...), flag)
		if _, err := runPlanArgs(t, args...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", flag, err, want)
		}
	}
}

// The JSON's plan_string is ready for --explain: it explains as the same plan.
func TestPlanJSONPlanString(t *testing.T) {
	args := []string{"--model", "gpt2", "--cluster", "../../plan/testdata/cpu-host.toml", "--devices", "2",
		"--seq", "256", "--global-batch", "8", "--top", "1"}
	out, err := runPlanArgs(t, append(args, "--json")...)
	if err != nil {
		t.Fatal(err, out)
	}
	var r struct {
		Plans []struct {
			PlanString string `json:"plan_string"`
		} `json:"plans"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Plans) != 1 {
		t.Fatal(err, out)
	}
	out, err = runPlanArgs(t, append(args, "--explain", r.Plans[0].PlanString)...)
	if err != nil || !strings.Contains(out, "this is the best plan found") {
		t.Errorf("explain %s: %v\n%s", r.Plans[0].PlanString, err, out)
	}
	if strings.Contains(out, "0.0 GiB") {
		t.Errorf("units not by magnitude:\n%s", out)
	}
}
