#!/bin/sh
# Validation loss of fp32 against precision=bf16 and fp16 after STEPS steps, for two
# models on two texts (docs/BENCHMARKS.md, "Mixed precision"):
#   the default job's model (layers 4, hidden 256, seq 128, byte vocab) on
#   the embedded novel, one device, no budget;
#   a smaller one (layers 2, hidden 128, seq 128) on TEXT (default: the King
#   James Bible of ../shared/data).
# Usage: scripts/precision_check.sh [STEPS] [TEXT]    (from the repository root)
set -eu
steps=${1:-300}
text=${2:-../shared/data/kjv.txt}
out=$(mktemp -d)
go build -o "$out/trellis" ./cmd/trellis
run() { # name precision extra-args...
	name=$1 prec=$2
	shift 2
	"$out/trellis" train --parallel "dp=1,precision=$prec" --device-memory 0 \
		--set train.steps="$steps" --set train.eval_every=100 --set train.sample_every=-1 \
		--set train.threads=1 --set checkpoint.dir="$out/ck-$name-$prec" "$@" >"$out/$name-$prec.log" 2>&1
	grep -o 'val_loss=[0-9.]*' "$out/$name-$prec.log" | tail -n 1 | cut -d= -f2
}
for name in default other; do
	if [ $name = other ]; then
		set -- --set model.layers=2 --set model.hidden=128 --set model.heads=4 \
			--set data.source="$text" --set data.cache_dir=off
	else
		set --
	fi
	a=$(run $name fp32 "$@")
	for prec in bf16 fp16; do
		b=$(run $name $prec "$@")
		awk -v n=$name -v p=$prec -v a="$a" -v b="$b" -v s="$steps" 'BEGIN { printf "%-8s step %d: val loss fp32 %s  %s %s  (%s/fp32 - 1 = %+.2f%%)\n", n, s, a, p, b, p, 100*(b/a-1) }'
	done
done
rm -rf "$out"
