#!/usr/bin/env bash
# A launched 4-process training run of the reference model (layers 4,
# hidden 256, heads 4, seq 256, micro-batch 8, vocab 512, synthetic data)
# with --backend auto (comm/shm on this host) against --backend tcp,
# alternating runs so that machine noise hits both alike, for each plan
# given (docs/BENCHMARKS.md, "Training across processes: auto against
# tcp"). Each run reports the median tokens/s of steps 4..STEPS; the
# summary takes the median of each backend's runs, and checks that the two
# backends' losses agree bit for bit, step by step.
#
#   scripts/bench_backends.sh [rounds] [plans...]   # default: 3 dp=4,zero=3 tp=4
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
rounds=${1:-3}
shift || true
plans=("$@")
[ ${#plans[@]} -gt 0 ] || plans=(dp=4,zero=3 tp=4)
STEPS=${STEPS:-16}
PY=/usr/bin/python3
if [ -z "${BENCH_BACKENDS_LOCKED:-}" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	go build -o "$tmp/trellis" ./cmd/trellis
	BENCH_BACKENDS_LOCKED=$tmp exec flock /tmp/bench.lock "$0" "$rounds" "${plans[@]}"
fi
tmp=$BENCH_BACKENDS_LOCKED
job=(--set data.source=synthetic --set model.vocab=512 --set model.seq_len=256
	--set model.layers=4 --set model.hidden=256 --set model.heads=4 --set train.grad_clip=0
	--set train.micro_batch=8 --set train.global_batch=32 --set train.steps="$STEPS" --set train.warmup=3
	--set train.threads=1 --set train.eval_every=0 --set train.eval_batches=0
	--set train.sample_every=-1 --set checkpoint.dir= --set parallel.device_memory=)
for r in $(seq "$rounds"); do
	for plan in "${plans[@]}"; do
		for b in auto tcp; do
			m="$tmp/$plan-$b-$r.jsonl"
			"$tmp/trellis" launch --nproc-per-node 4 -- "$tmp/trellis" train "${job[@]}" \
				--set parallel.plan="$plan" --backend "$b" --metrics "$m" >/dev/null 2>&1
			"$PY" - "$m" "$plan" "$b" "$r" <<'PY' >>"$tmp/runs"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = sorted(x["tokens_per_s"] for x in rows[3:])
print(json.dumps({"plan": sys.argv[2], "backend": sys.argv[3], "round": int(sys.argv[4]),
                  "tokens_per_s": t[len(t) // 2], "losses": [x["loss"] for x in rows]}))
PY
		done
		echo "round $r, $plan done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	done
done
"$PY" - "$tmp/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("| plan | auto tokens/s | tcp tokens/s | auto / tcp (median of rounds) | rounds (auto/tcp) | losses equal |")
print("|---|---|---|---|---|---|")
for plan in dict.fromkeys(r["plan"] for r in runs):
    a = {r["round"]: r for r in runs if r["plan"] == plan and r["backend"] == "auto"}
    t = {r["round"]: r for r in runs if r["plan"] == plan and r["backend"] == "tcp"}
    ratios = [a[k]["tokens_per_s"] / t[k]["tokens_per_s"] for k in sorted(a) if k in t]
    same = all(a[k]["losses"] == t[k]["losses"] for k in a if k in t)
    print(f"| {plan} | {statistics.median(x['tokens_per_s'] for x in a.values()):,.0f} | "
          f"{statistics.median(x['tokens_per_s'] for x in t.values()):,.0f} | {statistics.median(ratios):.2f} | "
          f"{', '.join(f'{x:.2f}' for x in ratios)} | {'yes' if same else 'NO'} |")
PY
