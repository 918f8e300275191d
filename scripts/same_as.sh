#!/usr/bin/env bash
# Runs a grid of plans with two trellis binaries and compares what a user
# sees: every step's loss and gradient norm, the validation loss, and every
# rank's peak bytes per memory tag (the --metrics lines). Bit for bit: the
# numbers are compared as the JSON prints them (shortest round-trip form,
# so equal text is equal bits).
#
#   scripts/same_as.sh REV [OUT_DIR]     # REV: a commit, e.g. ed1cb48
#
# builds REV (git worktree in a temp dir) and the working tree, runs the
# grid below with each and prints one line per plan: "same"; "MEM" when the
# losses and norms are the same bit for bit but some memory tag is not
# (with rank 0's tags before and now); or the first difference. The grid is the engine's equivalence and memory grids (dp
# and ZeRO 0-3, tp ± sp, pp with every schedule, 3D, recomputation, flash,
# bf16 and fp16) on a small model with dropout, non-power-of-two widths
# and an uneven pipeline split; plans the older binary refuses are run by
# the new one only and listed as "new". It takes 3-6 minutes on 2 vCPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/same_as.sh REV [OUT_DIR]}
out=$(realpath -m "${2:-$(mktemp -d)}")
mkdir -p "$out"
if [[ ! -x "$out/old" ]]; then
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$rev"
	(cd "$wt" && CGO_ENABLED=0 go build -o "$out/old" ./cmd/trellis)
	git worktree remove --force "$wt"
fi
CGO_ENABLED=0 go build -o "$out/new" ./cmd/trellis

# A 5-layer model (uneven pipeline stages), width 96 over 6 heads, vocab
# 259 (a multiple of neither tp=2 nor tp=3: the vocab-parallel padding),
# with dropout.
common=(--set model.layers=5 --set model.hidden=96 --set model.heads=6 --set model.seq_len=32
	--set model.vocab=259 --set model.dropout=0.1 --set train.micro_batch=2 --set train.global_batch=8
	--set train.steps=3 --set train.warmup=1 --set train.eval_every=3 --set train.eval_batches=2
	--set train.sample_every=-1 --set checkpoint.dir= --set parallel.device_memory=0
	--set parallel.bucket_size=64KiB --set data.source=embedded)
plans=(
	dp=1 dp=2 dp=2,zero=1 dp=2,zero=2 dp=2,zero=3 dp=4,zero=3
	tp=2 tp=2,sp=on tp=3 dp=2,tp=2,zero=1 dp=2,tp=2,sp=on,zero=3
	pp=2 pp=2,schedule=gpipe pp=2,vpp=2,schedule=interleaved pp=2,schedule=zb-h1 pp=3
	dp=2,pp=2,zero=1 tp=2,pp=2,sp=on dp=2,tp=2,pp=2 dp=2,tp=2,pp=2,zero=1,schedule=interleaved,vpp=2
	recompute=selective recompute=full dp=2,zero=3,recompute=full tp=2,sp=on,recompute=selective
	pp=2,recompute=full,schedule=zb-h1 flash=on tp=2,flash=on,recompute=full
	precision=bf16 dp=2,zero=1,precision=bf16 dp=2,zero=2,precision=bf16 dp=2,zero=3,precision=bf16
	tp=2,sp=on,precision=bf16 pp=2,precision=bf16 dp=2,pp=2,zero=1,precision=bf16
	pp=2,schedule=zb-h1,precision=bf16 precision=bf16,flash=on,recompute=selective
	precision=fp16 dp=2,zero=3,precision=fp16 tp=2,precision=fp16
	dp=2,pp=2,zero=2 dp=2,pp=2,zero=3 dp=2,pp=2,zero=3,schedule=interleaved,vpp=2
	dp=2,pp=2,zero=2,schedule=zb-h1 tp=2,pp=2,schedule=zb-h1 tp=2,sp=on,pp=2,schedule=zb-h1
	dp=2,pp=2,zero=3,precision=bf16 tp=2,pp=2,schedule=zb-h1,precision=bf16
)
# What a user sees, one line per step: loss, norm, val loss, every rank's
# tags. A pipeline's comm tag (and so its total peak) counts the messages
# that arrived before their receive was posted, which depends on timing:
# for pp plans those two are compared apart ("comm differs" is not a
# failure, a run of the same binary twice shows it too).
view='[.step, .loss, .grad_norm, (.val_loss // null), ([.ranks[] | [.param, .grad, .optim, .act, .workspace] + (if $pp then [] else [.comm, .peak] end)])] | tostring'
loose='[.step, ([.ranks[] | [.comm, .peak]])] | tostring'
status=0
for p in "${plans[@]}"; do
	f=$(echo "$p" | tr ',=' '_-')
	if ! "$out/old" train "${common[@]}" --parallel "$p" --metrics "$out/$f.old.jsonl" >"$out/$f.old.log" 2>&1; then
		if "$out/new" train "${common[@]}" --parallel "$p" --metrics "$out/$f.new.jsonl" >"$out/$f.new.log" 2>&1; then
			echo "new   $p"
		else
			echo "FAIL  $p (both refuse: $(tail -1 "$out/$f.new.log"))"
		fi
		continue
	fi
	if ! "$out/new" train "${common[@]}" --parallel "$p" --metrics "$out/$f.new.jsonl" >"$out/$f.new.log" 2>&1; then
		echo "FAIL  $p: $(tail -1 "$out/$f.new.log")"
		status=1
		continue
	fi
	pp=false
	[[ "$p" == *pp=* ]] && pp=true
	for v in old new; do
		jq -r --argjson pp "$pp" "$view" "$out/$f.$v.jsonl" >"$out/$f.$v.txt"
		jq -r "$loose" "$out/$f.$v.jsonl" >"$out/$f.$v.comm.txt"
	done
	num='[.step, .loss, .grad_norm, (.val_loss // null)] | tostring'
	tags='[.ranks[] | [.param, .grad, .optim, .act, .workspace]] | tostring'
	if ! cmp -s "$out/$f.old.txt" "$out/$f.new.txt"; then
		if cmp -s <(jq -r "$num" "$out/$f.old.jsonl") <(jq -r "$num" "$out/$f.new.jsonl"); then
			echo "MEM   $p (losses and norms the same bit for bit; rank 0's param, grad, optim, act, workspace bytes:"
			echo "      $(jq -r "$tags" "$out/$f.old.jsonl" | tail -1 | jq -c '.[0]') before, $(jq -r "$tags" "$out/$f.new.jsonl" | tail -1 | jq -c '.[0]') now)"
		else
			echo "DIFF  $p"
			diff "$out/$f.old.txt" "$out/$f.new.txt" | head -4 | sed 's/^/      /' || true
		fi
		status=1
	elif $pp && ! cmp -s "$out/$f.old.comm.txt" "$out/$f.new.comm.txt"; then
		echo "same  $p (comm differs: early messages)"
	else
		echo "same  $p"
	fi
done
exit $status
