#!/usr/bin/env bash
# 64 MiB fp32 all-reduce busbw of trellis's shm, tcp and mpi backends, of
# the in-process local backend and of PyTorch's gloo, and 64 MiB all-to-all
# of shm and tcp, on this machine, for 2 and 4 ranks (docs/BENCHMARKS.md,
# "All-reduce busbw: shm, tcp, mpi and gloo"). The builds run first; then
# the whole comparison holds /tmp/bench.lock once, the backends interleaved
# round by round (REPEATS rounds), and each row's median over the rounds
# is printed at the end, then the ratios the targets name (shm over gloo,
# over local; shm all-to-all over tcp's), each the median of the rounds'
# own ratios.
#
#   scripts/bench_busbw.sh            # REPEATS=3 ITERS=5 RANKS="2 4"
#   MPI=0 scripts/bench_busbw.sh      # without the mpi rows
#
# mpi rows need Open MPI (mpirun, mpicc for cgo); they are skipped
# without it. MPI_OPTS lists the mpirun option sets measured, one per
# line ("" is Open MPI's defaults); each is also measured with Open MPI
# alone (scripts/mpi_allreduce.c: MPI_Allreduce, and MPI_Iallreduce
# polled with MPI_Test as comm/mpi does).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-5}
RANKS=${RANKS:-"2 4"}
BYTES=$((64 << 20))
PY=/usr/bin/python3
# The option sets: Open MPI's defaults; vader's shared-memory copy instead
# of CMA (process_vm_readv, slow in this VM); glibc keeping big blocks in
# its heap, so the 64 MiB temporary that each MPI_Allreduce mallocs is not
# mmap'd and page-faulted afresh on every call; both.
GLIBC="-x MALLOC_MMAP_THRESHOLD_=2147483647 -x MALLOC_TRIM_THRESHOLD_=4294967295"
MPI_OPTS=${MPI_OPTS:-"
--mca btl_vader_single_copy_mechanism none
$GLIBC
$GLIBC --mca btl_vader_single_copy_mechanism none"}

if [ -z "${BENCH_BUSBW_LOCKED:-}" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	go build -o "$tmp/trellis" ./cmd/trellis
	if [ "${MPI:-1}" != 0 ] && command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
		go build -tags mpi -o "$tmp/trellis-mpi" ./cmd/trellis
		mpicc -O2 -o "$tmp/mpi_allreduce" scripts/mpi_allreduce.c
	fi
	BENCH_BUSBW_LOCKED=$tmp exec flock /tmp/bench.lock "$0" "$@"
fi
tmp=$BENCH_BUSBW_LOCKED
have_mpi=0
[ -x "$tmp/trellis-mpi" ] && have_mpi=1
have_gloo=0
if "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
	have_gloo=1
fi

# busbw of trellis's JSON report on stdin.
busbw() { "$PY" -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["busbw_gbps"])'; }

bench=(bench comm --ops allreduce --sizes 64MiB --iters "$ITERS" --json)
a2a=(bench comm --ops alltoall --sizes 64MiB --iters "$ITERS" --json)
mpi=(mpirun --allow-run-as-root --oversubscribe)
for round in $(seq "$REPEATS"); do
	for n in $RANKS; do
		for b in shm local tcp; do
			v=$("$tmp/trellis" "${bench[@]}" --backend "$b" --ranks "$n" </dev/null | busbw)
			echo "$b|$n|$v|$round" >>"$tmp/rows"
		done
		for b in shm tcp; do
			v=$("$tmp/trellis" "${a2a[@]}" --backend "$b" --ranks "$n" </dev/null | busbw)
			echo "$b alltoall|$n|$v|$round" >>"$tmp/rows"
		done
		if [ $have_gloo = 1 ]; then
			v=$("$PY" scripts/bench_gloo.py --ranks "$n" --bytes $BYTES --iters "$ITERS" --repeats 1 |
				"$PY" -c 'import json,sys; print(json.load(sys.stdin)["busbw_gbps"][0])')
			echo "gloo|$n|$v|$round" >>"$tmp/rows"
		fi
		if [ $have_mpi = 1 ]; then
			while IFS= read -r opts; do
				# shellcheck disable=SC2086
				v=$("${mpi[@]}" -np "$n" $opts "$tmp/trellis-mpi" "${bench[@]}" --backend mpi </dev/null | busbw)
				echo "mpi ${opts:-(defaults)}|$n|$v|$round" >>"$tmp/rows"
				# shellcheck disable=SC2086
				"${mpi[@]}" -np "$n" $opts "$tmp/mpi_allreduce" "$ITERS" </dev/null | "$PY" -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    print("Open MPI C %s %s|%d|%s|%s" % (r["op"], sys.argv[1], r["ranks"], r["busbw_gbps"], sys.argv[2]))' "${opts:-(defaults)}" "$round" >>"$tmp/rows"
			done <<<"$MPI_OPTS"
		fi
		echo "round $round, $n ranks done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	done
done

echo "| backend | ranks | busbw GB/s, median of $REPEATS | runs |"
echo "|---|---|---|---|"
"$PY" - "$tmp/rows" <<'EOF'
import statistics, sys
rows, by_round = {}, {}
for line in open(sys.argv[1]):
    name, n, v, rnd = line.strip().split("|")
    rows.setdefault((name, int(n)), []).append(float(v))
    by_round[(name, int(n), rnd)] = float(v)
for (name, n), vs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {name} | {n} | {statistics.median(vs):.3f} | {', '.join(f'{v:.3f}' for v in vs)} |")
print()
print("| ratio | ranks | median of the rounds' ratios | rounds |")
print("|---|---|---|---|")
for num, den in (("shm", "gloo"), ("shm", "local"), ("shm", "tcp"), ("shm alltoall", "tcp alltoall")):
    for n in sorted({k[1] for k in rows}):
        rs = [by_round[(num, n, r)] / by_round[(den, n, r)] for (nm, m, r) in by_round
              if nm == num and m == n and (den, n, r) in by_round and by_round[(den, n, r)] > 0]
        if rs:
            print(f"| {num} / {den} | {n} | {statistics.median(rs):.2f} | {', '.join(f'{x:.2f}' for x in rs)} |")
EOF
