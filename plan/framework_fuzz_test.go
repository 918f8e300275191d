package plan

import "testing"

// FuzzImport feeds arbitrary text to the three framework readers: any
// input gives a plan or an error, never a panic, and a plan read is one
// the cost model can check without panicking.
//
//	go test ./plan -run '^$' -fuzz FuzzImport -fuzztime 30s
func FuzzImport(f *testing.F) {
	j := job(f, "llama3-70b", "dgx-h100", 64, 8192, 128)
	for _, s := range []string{"dp=2,tp=4,pp=8,vpp=5,schedule=interleaved,sp=on,zero=1", "dp=8,tp=8,zero=3,sp=on,recompute=full,precision=fp16"} {
		p := mustParse(f, s)
		for i, fw := range Frameworks() {
			if em, err := j.Emit(fw, p); err == nil {
				f.Add(uint8(i), em.Text)
			}
		}
	}
	f.Add(uint8(0), "--pipeline-model-parallel-size 0 --num-virtual-stages-per-pipeline-rank 0")
	f.Add(uint8(1), "[parallelism]\nmodule_fqns_per_model_part = [[\"layers.0\"]]\npipeline_parallel_degree = 3")
	f.Add(uint8(2), `{"train_batch_size": 0, "gradient_accumulation_steps": -1}`)
	// Issue 29's panics: degree products that overflow to 0, microbatch 0.
	f.Add(uint8(0), "--tensor-model-parallel-size 4611686018427387904 --pipeline-model-parallel-size 4")
	f.Add(uint8(0), "--tensor-model-parallel-size 16777216 --pipeline-model-parallel-size 16777216 --context-parallel-size 16777216")
	f.Add(uint8(1), "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 0")
	f.Add(uint8(1), "[parallelism]\ntensor_parallel_degree = 4611686018427387904\npipeline_parallel_degree = 4")
	f.Add(uint8(2), `{"train_batch_size": 4611686018427387904, "train_micro_batch_size_per_gpu": 4611686018427387904}`)
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		fw := Frameworks()[int(which)%len(Frameworks())]
		rest, _ := ParseFix("tp=4,pp=8")
		im, err := j.Import(fw, text, rest)
		if err != nil {
			return
		}
		if e, err := j.Evaluate(im.Plan); err == nil && (!finite(e) || e.Memory.Total < 0) {
			t.Errorf("%s: %s predicts %g s, %d bytes", fw, im.Plan, e.Time.Step, e.Memory.Total)
		}
	})
}
