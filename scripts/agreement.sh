#!/usr/bin/env bash
# The planner's predictions against the engine's measurements
# (train.TestAgreementTable): peak memory per rank and step time, split
# into compute, exposed comm, bubble and misc, on a grid of 25 plans of a
# 4-layer h=128 GPT (three passes, each plan's quietest run: the lowest
# median step; the cores' speedup re-measured before every run and noted
# beside it, a plan that never had the profiled cores run again after
# waiting for them); then
# --parallel auto's choice against every plan that fits, on four jobs.
#
#   scripts/agreement.sh [CLUSTER.toml] [OUT.md]
#
# TRELLIS_AGREEMENT_ONLY=grid|auto runs one of the two tables, and
# TRELLIS_AGREEMENT_ROWS="dp=1;dp=4,zero=1" only those rows of the grid.
#
# Without a cluster file it profiles this machine first (trellis profile
# --quick, about 10 s), right before the runs, so that both see the same
# machine. The whole script takes 2–6 minutes on the 2-vCPU machine
# (1–4 min for the auto check, more while other work takes the cores).
# Timing needs a quiet machine: the profile and the table are taken
# under /tmp/bench.lock (flock), and the table records
# the load average before and after. The tables go to OUT.md (default
# agreement.md) and stdout; docs/BENCHMARKS.md ("Predicted against
# measured") is its output.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."
cluster=${1:-}
out=$(realpath -m "${2:-agreement.md}")
# One hold of the lock for the profile and the runs, so that no other
# timing run comes between them.
if [[ -z "${AGREEMENT_LOCKED:-}" ]] && command -v flock >/dev/null; then
	exec env AGREEMENT_LOCKED=1 flock /tmp/bench.lock "$self" "$@"
fi

start=$(date +%s)
if [[ -z "$cluster" ]]; then
	cluster=$(mktemp -d)/host.toml
	go build -o "$(dirname "$cluster")/trellis" ./cmd/trellis
	"$(dirname "$cluster")/trellis" profile --quick -o "$cluster"
fi
cluster=$(realpath "$cluster")
go test -c -o "$(dirname "$out")/.agreement.test" ./train
(cd train && env TRELLIS_AGREEMENT="$out" TRELLIS_CLUSTER="$cluster" "$(dirname "$out")/.agreement.test" \
	-test.run '^TestAgreementTable$' -test.count=1 -test.timeout 60m >/dev/null)
rm -f "$(dirname "$out")/.agreement.test"
cat "$out"
echo "(scripts/agreement.sh took $(($(date +%s) - start)) s)"
