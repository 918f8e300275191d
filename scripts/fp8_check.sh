#!/bin/sh
# Validation loss and wall time of precision=bf16 against precision=fp8 under
# both recipes (train.fp8_recipe = delayed, blockwise) after STEPS steps, on the
# default job's model (layers 4, hidden 256, seq 128, byte vocab) and the
# embedded novel, one device, one thread, no budget (docs/BENCHMARKS.md, "fp8").
# Usage: scripts/fp8_check.sh [STEPS]    (from the repository root)
set -eu
steps=${1:-300}
out=$(mktemp -d)
go build -o "$out/trellis" ./cmd/trellis
run() { # name precision extra-args...
	name=$1 prec=$2
	shift 2
	t0=$(date +%s.%N)
	"$out/trellis" train --parallel "dp=1,precision=$prec" --device-memory 0 \
		--set train.steps="$steps" --set train.eval_every=100 --set train.sample_every=-1 \
		--set train.threads=1 --set checkpoint.dir="$out/ck-$name" "$@" >"$out/$name.log" 2>&1
	t1=$(date +%s.%N)
	v=$(grep -o 'val_loss=[0-9.]*' "$out/$name.log" | tail -n 1 | cut -d= -f2)
	echo "$name $v $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b-a }')"
}
ref=$(run bf16 bf16)
echo "$ref"
set -- $ref
base=$2 tb=$3
for r in delayed blockwise; do
	line=$(run "fp8-$r" fp8 --set train.fp8_recipe=$r)
	set -- $line
	awk -v n="$1" -v b="$2" -v t="$3" -v a="$base" -v ta="$tb" -v s="$steps" 'BEGIN { printf "%-14s step %d: val loss %s, bf16 %s (%+.2f%%); wall %.1f s, bf16 %.1f s (%.2fx)\n", n, s, b, a, 100*(b/a-1), t, ta, t/ta }'
done
grep -h 'val_loss' "$out"/*.log | tail -n 12
rm -rf "$out"
