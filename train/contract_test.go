package train

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/model"
	"trellis/plan"
)

// hostProfile is a cluster file as `trellis profile --quick` writes it on
// a 2-core host (engine_stash set: the ranks run this engine).
const hostProfile = "testdata/host-profile.toml"

// contractJobs is the grid of TestPlannerTopPlansRunInEngine: GPT-2,
// Llama and MoE Llama shapes, small enough to dry-run quickly.
func contractJobs() []struct {
	name string
	job  Job
} {
	gpt := DefaultJob()
	gpt2 := DefaultJob()
	gpt2.Model = model.Config{Layers: 12, Hidden: 768, Heads: 12, SeqLen: 256, Vocab: 50257}
	gpt2.Train.MicroBatch, gpt2.Train.GlobalBatch = 1, 8
	llama := DefaultJob()
	llama.Model = model.Config{Arch: "llama", Layers: 4, Hidden: 256, Heads: 8, KVHeads: 2, FFN: 688, SeqLen: 128, Vocab: 256}
	odd := DefaultJob() // a batch that few dp divide
	odd.Model = model.Config{Arch: "llama", Layers: 3, Hidden: 96, Heads: 6, KVHeads: 3, FFN: 256, SeqLen: 64, Vocab: 259}
	odd.Train.MicroBatch, odd.Train.GlobalBatch = 1, 12
	moe := DefaultJob() // experts: ep, etp = tp and cp all open to the planner
	moe.Model = model.Config{Arch: "llama", Layers: 4, Hidden: 128, Heads: 4, KVHeads: 2, FFN: 256, SeqLen: 128, Vocab: 256,
		Experts: 8, TopK: 2, ExpertFFN: 64, SharedExperts: 1, DenseFirst: 1, CapacityFactor: 1.25, AuxLoss: 0.01}
	moe.Train.MicroBatch, moe.Train.GlobalBatch = 1, 8
	return []struct {
		name string
		job  Job
	}{{"gpt-ref", gpt}, {"gpt2-124m", gpt2}, {"llama-small", llama}, {"llama-odd", odd}, {"llama-moe", moe}}
}

// The contract: on a cluster whose ranks run the engine (a profile's
// cluster file), every plan among the planner's top 5 — as `trellis plan
// --cluster host.toml` ranks them — runs: the engine's dry run accepts
// it. The verdict is plan.EngineRefusals', so whatever the engine learns
// to run, the planner may recommend, and nothing else.
func TestPlannerTopPlansRunInEngine(t *testing.T) {
	data, err := os.ReadFile(hostProfile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := plan.ParseClusterFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if !c.EngineStash {
		t.Fatalf("%s: engine_stash is not set", hostProfile)
	}
	abs, _ := filepath.Abs(hostProfile)
	for _, tc := range contractJobs() {
		for _, d := range []int{1, 2, 4, 8} {
			pj := plan.Job{Model: planModel(tc.job.Model), Cluster: c, Devices: d, Seq: tc.job.Model.SeqLen, GlobalBatch: tc.job.Train.GlobalBatch}
			res, err := pj.Search(plan.Options{Top: 5})
			if err != nil {
				t.Fatalf("%s on %d: %v", tc.name, d, err)
			}
			if len(res.Plans) == 0 {
				t.Errorf("%s on %d devices: no plan (%v)", tc.name, d, pj.Advice(res, plan.Options{Top: 5}))
			}
			for i, e := range res.Plans {
				j := tc.job.withPlan(e.Plan.String(), d)
				j.Parallel.Cluster, j.Parallel.DeviceMemory = abs, ""
				if err := j.DryRun(io.Discard); err != nil {
					if strings.Contains(err.Error(), "more than this machine's memory") {
						// All ranks in this one process: the test machine's
						// memory, not the plan, decides (the planner does not
						// know the host's; see docs/PLANNER.md).
						t.Logf("%s on %d devices: plan #%d %s: not on this machine: %v", tc.name, d, i+1, e.Plan, err)
						continue
					}
					t.Errorf("%s on %d devices: plan #%d %s: the engine refuses it: %v", tc.name, d, i+1, e.Plan, err)
				}
			}
		}
	}
}

// On a GPU preset the plans the table marks as running on the CPU engine
// (plan.Job.EngineNote) dry-run in the engine, on the host profile.
func TestGPUPresetEnginePlansRun(t *testing.T) {
	c, err := plan.ClusterPreset("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(hostProfile)
	ran := 0
	for _, tc := range contractJobs() {
		for _, fix := range []string{"", "precision=bf16"} {
			f, err := plan.ParseFix(fix)
			if err != nil {
				t.Fatal(err)
			}
			pj := plan.Job{Model: planModel(tc.job.Model), Cluster: c, Devices: 8, Seq: tc.job.Model.SeqLen, GlobalBatch: tc.job.Train.GlobalBatch}
			res, err := pj.Search(plan.Options{Fix: f, Top: 5})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			for _, e := range res.Plans {
				if pj.EngineNote(e.Plan) != "runs on the CPU engine" {
					continue
				}
				j := tc.job.withPlan(e.Plan.String(), 8)
				j.Parallel.Cluster, j.Parallel.DeviceMemory = abs, ""
				if err := j.DryRun(io.Discard); err != nil {
					t.Errorf("%s on dgx-h100: %s is marked as running on the CPU engine, which refuses it: %v", tc.name, e.Plan, err)
				}
				ran++
			}
		}
	}
	if ran == 0 {
		t.Error("no plan of the grid was marked as running on the CPU engine")
	}
}

// The dry run checks a plan as the run does: a plan's mbs is the
// micro-batch (Normalized), so a planner plan whose mbs differs from
// train.micro_batch is judged by its own (it was refused: 12 is not a
// multiple of 8, though mbs=4 divides it).
func TestDryRunTakesThePlanMBS(t *testing.T) {
	j := tinyJob("dp=1,mbs=4")
	j.Train.MicroBatch, j.Train.GlobalBatch = 8, 12
	if err := j.Check(); err != nil {
		t.Fatalf("the run refuses it: %v", err)
	}
	if err := j.DryRun(io.Discard); err != nil {
		t.Errorf("the dry run refuses what the run accepts: %v", err)
	}
}
