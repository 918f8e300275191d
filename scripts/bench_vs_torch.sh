#!/usr/bin/env bash
# Side-by-side training throughput on the reference model (layers 4, hidden
# 256, heads 4, seq 256, micro-batch 8, vocab 512, synthetic data, AdamW), one
# thread each, alternating runs so that machine noise hits both alike. Both
# run AdamW without gradient clipping (scripts/torch_gpt.py does not clip).
# Usage: scripts/bench_vs_torch.sh [rounds] [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-1}
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
# OpenBLAS 0.3.21 does not recognise every AVX-512 CPU (on the Xeon this was
# measured on it falls back to its Prescott kernels at a fifth of the speed);
# give PyTorch the best kernels the CPU runs: SkylakeX where AVX-512 exists.
torch_core=${TORCH_OPENBLAS_CORETYPE:-}
if [ -z "$torch_core" ] && grep -qw avx512f /proc/cpuinfo; then torch_core=SkylakeX; fi
# The Go runtime gets as many CPUs as the kernels have threads, as OpenBLAS
# and OpenMP get for PyTorch: with a spare one the step's goroutine can be
# resumed on the other CPU after a hand-off and find its caches cold.
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
dir=$(mktemp -d)
bin=$dir/trellis
go build -o "$bin" ./cmd/trellis
metrics=$dir/metrics.jsonl
results=$dir/results.jsonl
for r in $(seq "$rounds"); do
	OPENBLAS_CORETYPE=$torch_core /usr/bin/python3 scripts/torch_gpt.py --threads "$threads" --steps 20
	GOMAXPROCS=$threads "$bin" train --set parallel.plan=dp=1 --set parallel.device_memory= \
		--set data.source=synthetic --set model.vocab=512 --set model.seq_len=256 \
		--set model.layers=4 --set model.hidden=256 --set model.heads=4 --set train.grad_clip=0 \
		--set train.micro_batch=8 --set train.global_batch=8 --set train.steps=23 --set train.warmup=3 \
		--set train.threads="$threads" --set train.eval_every=0 --set train.eval_batches=0 \
		--set train.sample_every=-1 --set checkpoint.dir= --metrics "$metrics" 2>/dev/null >/dev/null
	# median tokens/s of steps 4..23
	python3 - "$metrics" "$threads" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]
r = sorted(x["tokens_per_s"] for x in rows)
print(json.dumps({"impl": "trellis", "threads": int(sys.argv[2]), "tokens_per_s": r[len(r)//2], "loss": rows[-1]["loss"]}))
PY
done | tee -a "$results"
# the medians over rounds and their ratio
python3 - "$results" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def median(impl):
    v = sorted(r["tokens_per_s"] for r in runs if r["impl"].startswith(impl))
    return v[len(v) // 2]
t, p = median("trellis"), median("pytorch")
print(json.dumps({"summary": True, "rounds": len(runs) // 2, "pytorch_tokens_per_s": round(p), "trellis_tokens_per_s": round(t), "ratio": round(t / p, 3)}))
PY
