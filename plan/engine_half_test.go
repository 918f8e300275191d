package plan

import "testing"

// engineTinyJob is the engine's tiny test model (train's tinyJob with 4
// blocks: h = 32, 2 heads, V = 256, 16 tokens, tied, dropout off) on the
// CPU host cluster file with engine_stash, 8 devices.
func engineTinyJob(t *testing.T) Job {
	t.Helper()
	c := cpuHostCluster(t)
	c.EngineStash = true
	m := Model{Name: "tiny", Family: GPT, Layers: 4, Hidden: 32, Heads: 2, KVHeads: 2, FFN: 128, Vocab: 256, MaxSeq: 16,
		Tied: true, AttnBias: true, MLPBias: true}
	return Job{Model: m, Cluster: c, Devices: 8, Seq: 16, GlobalBatch: 8}
}

// The engine's workspace under bf16 and fp16 adds the 16-bit GEMM
// operands' scratch (model.dims.halfScratch) to the fp32 scratch, and a
// block's 13C rounded vectors in fp32 (13·32·4 = 1664 bytes): for
// T = mbs·s = 32 tokens, C = 32, F = 4C/t, V' = ⌈256/t⌉, 2 bytes each,
//
//	t = 1:        2·32·max(32, 128, 256) + 1664       = 18048 bytes
//	t = 2:        2·32·max(32, 64, 128) + 1664        = 9856 bytes
//	t = 2, sp:    2·32·(32 + max(32, 64, 128)) + 1664 = 11904 bytes
//
// (the GEMMs read their activation operand from the 16-bit stash, so only
// dy is scratch, and with sp the gathered LayerNorm output T·C), the
// difference train's TestHalfParallelMemoryPredicted measures on the
// engine's devices. Under ZeRO-3 with t = 2 the bf16 copy is the largest unit of a
// tensor-parallel rank, a block of 12h²/t + 7h/t + 6h = 6448 parameters
// (the embedding's (V' + s)·h = 4608 is smaller): 12896 bytes.
func TestEngineHalfWorkspaceAndParam(t *testing.T) {
	j := engineTinyJob(t)
	for _, tc := range []struct {
		plan  string
		extra int64
	}{{"dp=1,mbs=2,flash=off", 18048}, {"tp=2,mbs=2,flash=off", 9856}, {"tp=2,sp=on,mbs=2,flash=off", 11904},
		{"pp=2,tp=2,dp=2,zero=1,mbs=2,flash=off", 9856}} {
		for _, prec := range []string{"bf16", "fp16"} {
			f32 := j.Memory(mustParse(t, tc.plan+",precision=fp32"))
			half := j.Memory(mustParse(t, tc.plan+",precision="+prec))
			if got := half.Workspace - f32.Workspace; got != tc.extra {
				t.Errorf("%s,precision=%s: workspace %d bytes over fp32's, want the 16-bit scratch %d", tc.plan, prec, got, tc.extra)
			}
		}
	}
	if got := j.Memory(mustParse(t, "dp=2,tp=2,zero=3,mbs=2,flash=off,precision=bf16")).Param; got != 12896 {
		t.Errorf("dp=2,tp=2,zero=3,precision=bf16: param %d bytes, want 2·6448 = 12896", got)
	}
}
