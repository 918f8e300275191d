#!/usr/bin/env bash
# Training throughput with the live dashboard open against without, side by
# side: the default job (dp=4, ZeRO-3) for STEPS steps, REPS rounds of three
# interleaved runs:
#   off      no dashboard;
#   sse      --dashboard, one server-sent-events client (curl) taking every frame;
#   browser  --dashboard, shown by headless Chromium on this same machine.
# One Chromium runs for the whole benchmark (its start-up is not measured);
# for each browser run a tab is opened on the dashboard through Chromium's
# DevTools HTTP endpoint once the run's server answers, and closed after
# the run. Opening the tab (a renderer process) and the first render are
# part of each browser run: most of Chromium's CPU in a short run, paid
# once by a real one (BenchmarkBrowserCPU measures the steady state). Prints each run's median tokens/s (from the
# end-of-run summary) and the CPU seconds of the trellis process (which other
# tenants of a shared machine disturb less than wall time), for the browser
# runs Chromium's CPU seconds per minute (all its processes), and the ratios
# of the medians and the means to "off".
#
# Usage: scripts/bench_dashboard.sh [REPS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
steps=${2:-30}
port=18765 # the browser watches this one; the sse runs use port+1
url="http://127.0.0.1:$port"
devtools="http://127.0.0.1:$((port + 2))"
sseurl="http://127.0.0.1:$((port + 1))"
tmp=$(mktemp -d)
chrome_pid=
trap 'if [ -n "$chrome_pid" ]; then kill "$chrome_pid" 2>/dev/null; wait "$chrome_pid" 2>/dev/null; sleep 1; fi; rm -rf "$tmp" 2>/dev/null || true' EXIT
go build -o "$tmp/trellis" ./cmd/trellis
chrome=$(command -v chromium || command -v chromium-browser || true)

# tps ARGS...: one run's median tokens/s and the CPU seconds (user + system)
# the trellis process used, as "TPS CPU".
tps() {
	/usr/bin/time -f "%U %S" -o "$tmp/time" "$tmp/trellis" train --set train.steps="$steps" --set checkpoint.dir= \
		--set train.sample_every=-1 --set train.eval_every=0 --set train.warmup=5 "$@" 2>/dev/null >"$tmp/out" || true
	echo "$(grep -o '[0-9]* tokens/s' "$tmp/out" | head -1 | cut -d' ' -f1) $(awk '{print $1 + $2}' "$tmp/time")"
}

# tree_cpu PID: CPU seconds (user + system, reaped children included) of PID
# and its descendants.
tree_cpu() {
	cat /proc/[0-9]*/stat 2>/dev/null | awk -v root="$1" '{
		pid = $1; l = $0; sub(/^.*\) /, "", l); split(l, f, " ")
		pp[pid] = f[2]; t[pid] = f[12] + f[13] + f[14] + f[15]
	} END {
		tree[root] = 1
		do { ch = 0; for (p in pp) if (!(p in tree) && (pp[p] in tree)) { tree[p] = 1; ch = 1 } } while (ch)
		for (p in tree) s += t[p]
		printf "%.2f\n", s / 100
	}'
}

if [ -n "$chrome" ]; then
	"$chrome" --headless --no-sandbox --disable-gpu --remote-debugging-port=$((port + 2)) --user-data-dir="$tmp/profile" \
		--window-size=1300,1800 about:blank >/dev/null 2>&1 &
	chrome_pid=$!
	sleep 15 # let it start before the first measurement
fi

printf "%-6s %20s %20s %32s\n" round "off: tok/s, CPU s" "sse: tok/s, CPU s" "browser: tok/s, CPU s, Chromium s/min"
for r in $(seq "$reps"); do
	off=$(tps)
	(for _ in $(seq 600); do curl -sN "$sseurl/events" >/dev/null 2>&1 && break; sleep 0.1; done) & v=$!
	sse=$(tps --dashboard "127.0.0.1:$((port + 1))")
	wait $v
	br="0 0 0"
	if [ -n "$chrome" ]; then
		(for _ in $(seq 600); do curl -s -o /dev/null "$url/metrics.jsonl" && break; sleep 0.1; done
			curl -s -X PUT "$devtools/json/new?$url/" >"$tmp/tab") & v=$!
		c0=$(tree_cpu "$chrome_pid") t0=$(date +%s.%N)
		br=$(tps --dashboard "127.0.0.1:$port")
		c1=$(tree_cpu "$chrome_pid") t1=$(date +%s.%N)
		wait $v
		tab=$(grep -o '"id": *"[^"]*"' "$tmp/tab" | sed 's/.*"\([^"]*\)"$/\1/')
		curl -s "$devtools/json/close/$tab" >/dev/null
		br="$br $(echo "$c0 $c1 $t0 $t1" | awk '{printf "%.2f", ($2 - $1) * 60 / ($4 - $3)}')"
	fi
	printf "%-6s %20s %20s %32s\n" "$r" "$off" "$sse" "$br"
	echo "$off $sse $br" >>"$tmp/all"
done
# Medians (less swayed by a round that another tenant slowed) and means.
for c in 1 2 3 4 5 6 7; do sort -n -k$c,$c "$tmp/all" | awk -v c=$c '{v[NR] = $c} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; done |
	paste -sd' ' >"$tmp/med"
awk '{printf "median %13.0f %6.2f %13.0f %6.2f %13.0f %6.2f %8.2f\n", $1, $2, $3, $4, $5, $6, $7
     printf "median ratio to off: tokens/s sse %.3f, browser %.3f; CPU s sse %.3f, browser %.3f\n", $3/$1, $5/$1, $4/$2, $6/$2}' "$tmp/med"
awk '{for (i = 1; i <= 7; i++) s[i] += $i}
END {printf "mean   %13.0f %6.2f %13.0f %6.2f %13.0f %6.2f %8.2f\n", s[1]/NR, s[2]/NR, s[3]/NR, s[4]/NR, s[5]/NR, s[6]/NR, s[7]/NR
     printf "mean ratio to off: tokens/s sse %.3f, browser %.3f; CPU s sse %.3f, browser %.3f\n", s[3]/s[1], s[5]/s[1], s[4]/s[2], s[6]/s[2]}' "$tmp/all"
