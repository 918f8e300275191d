#!/usr/bin/env bash
# 64 MiB fp32 all-reduce busbw of trellis's tcp and mpi backends and
# PyTorch's gloo, on this machine, for 2 and 4 ranks (docs/BENCHMARKS.md,
# "All-reduce busbw: tcp, mpi and gloo"). Every measurement holds
# /tmp/bench.lock; the backends are interleaved round by round (REPEATS
# rounds) and each row's median over the rounds is printed at the end.
#
#   scripts/bench_busbw.sh            # REPEATS=3 ITERS=5 RANKS="2 4"
#
# mpi rows need Open MPI (mpirun, mpicc for cgo); they are skipped
# without it. MPI_OPTS lists the mpirun option sets measured, one per
# line ("" is Open MPI's defaults).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-5}
RANKS=${RANKS:-"2 4"}
BYTES=$((64 << 20))
PY=/usr/bin/python3
MPI_OPTS=${MPI_OPTS:-"
--mca mpi_yield_when_idle 1
--mca btl_vader_single_copy_mechanism none"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/trellis" ./cmd/trellis
have_mpi=0
if command -v mpirun >/dev/null && go build -tags mpi -o "$tmp/trellis-mpi" ./cmd/trellis 2>/dev/null; then
	have_mpi=1
fi
have_gloo=0
if "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
	have_gloo=1
fi

# busbw of trellis's JSON report on stdin.
busbw() { "$PY" -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["busbw_gbps"])'; }

bench=(bench comm --ops allreduce --sizes 64MiB --iters "$ITERS" --json)
for round in $(seq "$REPEATS"); do
	for n in $RANKS; do
		v=$(flock /tmp/bench.lock "$tmp/trellis" "${bench[@]}" --backend tcp --ranks "$n" | busbw)
		echo "tcp|$n|$v" >>"$tmp/rows"
		if [ $have_gloo = 1 ]; then
			v=$(flock /tmp/bench.lock "$PY" scripts/bench_gloo.py --ranks "$n" --bytes $BYTES --iters "$ITERS" --repeats 1 |
				"$PY" -c 'import json,sys; print(json.load(sys.stdin)["busbw_gbps"][0])')
			echo "gloo|$n|$v" >>"$tmp/rows"
		fi
		if [ $have_mpi = 1 ]; then
			while IFS= read -r opts; do
				# shellcheck disable=SC2086
				v=$(flock /tmp/bench.lock mpirun --allow-run-as-root --oversubscribe -np "$n" $opts \
					"$tmp/trellis-mpi" "${bench[@]}" --backend mpi | busbw)
				echo "mpi ${opts:-(defaults)}|$n|$v" >>"$tmp/rows"
			done <<<"$MPI_OPTS"
		fi
		echo "round $round, $n ranks done" >&2
	done
done

echo "| backend | ranks | busbw GB/s, median of $REPEATS | runs |"
echo "|---|---|---|---|"
"$PY" - "$tmp/rows" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, n, v = line.strip().split("|")
    rows.setdefault((name, int(n)), []).append(float(v))
for (name, n), vs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {name} | {n} | {statistics.median(vs):.3f} | {', '.join(f'{v:.3f}' for v in vs)} |")
EOF
