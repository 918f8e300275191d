#!/usr/bin/env bash
# The planner's predictions against the engine's measurements on a grid of
# plans (train.TestAgreementTable): peak memory per rank and step time.
#
#   scripts/agreement.sh [CLUSTER.toml] [OUT.md]
#
# Without a cluster file it profiles this machine first (trellis profile
# --quick). The table goes to OUT.md (default agreement.md) and stdout;
# docs/BENCHMARKS.md ("Predicted against measured") is its output.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${1:-}
out=$(realpath -m "${2:-agreement.md}")
if [[ -z "$cluster" ]]; then
	cluster=$(mktemp -d)/host.toml
	go run ./cmd/trellis profile --quick -o "$cluster"
fi
cluster=$(realpath "$cluster")
TRELLIS_AGREEMENT="$out" TRELLIS_CLUSTER="$cluster" go test ./train -run '^TestAgreementTable$' -count=1 -timeout 60m >/dev/null
cat "$out"
