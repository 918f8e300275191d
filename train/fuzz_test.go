package train

import (
	"os"
	"path/filepath"
	"testing"

	"trellis/config"
	"trellis/device"
	"trellis/model"
	"trellis/ops"
	"trellis/parallel/zero"
)

// fuzzMemoryCap is the estimated memory (all ranks) under which FuzzJob
// goes on to build the model runner and the ZeRO accounting: large enough
// for the examples' shapes scaled down, small enough for many runs a second.
const fuzzMemoryCap = 32 << 20

// FuzzJob drives job text and two --set overrides through the whole job
// path: TOML decoding, overrides, validation, the plan, the pre-allocation
// estimate and, when the estimate is under fuzzMemoryCap, the model runner
// (on a device with a budget) and ZeRO's memory accounting. Nothing may
// panic; every refusal is an error. Seeded from examples/*.toml and the
// inputs of the hardening issue.
func FuzzJob(f *testing.F) {
	files, _ := filepath.Glob("../examples/*.toml")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "", "")
	}
	for _, s := range [][2]string{
		{"model.layers=4611686018427387904", ""},
		{"train.micro_batch=4611686018427387904", "train.global_batch=4611686018427387904"},
		{"model.vocab=100000000", "parallel.device_memory=1GiB"},
		{"parallel.device_memory=1e30", ""},
		{"parallel.device_memory=0.5", ""},
		{"parallel.bucket_size=-2305843009213693952", ""},
		{"data.source=/dev/zero", ""},
		{"parallel.plan=dp=3,zero=2", "train.global_batch=6"},
		{"model.hidden=1", "model.heads=1"},
		{"parallel.timeout=-5s", "train.threads=1000000"},
	} {
		f.Add("[model]\nlayers = 1\nhidden = 8\nheads = 2\nseq_len = 4\nvocab = 256\n[data]\nsource = \"synthetic\"\n", s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, text, set1, set2 string) {
		j := DefaultJob()
		var sets []string
		for _, s := range []string{set1, set2} {
			if s != "" {
				sets = append(sets, s)
			}
		}
		if err := config.Decode(&j, "fuzz.toml", []byte(text), sets); err != nil {
			return
		}
		s, err := j.resolve()
		if err != nil {
			return
		}
		e := estimate(j.Model, j.Train.MicroBatch, s.enginePlan, s.threads)
		if e.perRank()*float64(s.ranks) > fuzzMemoryCap {
			return
		}
		buildRunner(t, j, s)
	})
}

// buildRunner builds what a rank builds from the job, within a budget:
// the model runner with its stash, and under ZeRO the memory accounting.
func buildRunner(t *testing.T, j Job, s settings) {
	dev := device.New(device.Config{Budget: 2 * fuzzMemoryCap})
	k, err := ops.New(ops.Config{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	gpt, err := model.New(model.Options{Model: j.Model, Kernels: k, Device: dev, MicroBatch: j.Train.MicroBatch})
	if err != nil {
		return
	}
	defer gpt.Free()
	st, err := gpt.NewStash()
	if err != nil {
		return
	}
	st.Free()
	if p := s.enginePlan; p.ZeRO > 0 {
		_, _ = zero.Shape{Layout: j.Model.Layout(), Stage: p.ZeRO, Ranks: p.DP, BucketElems: int(s.bucket / 4), Overlap: j.Parallel.Overlap}.Memory()
	}
}
