#!/usr/bin/python3
"""PyTorch gloo all-reduce busbw, measured the way `trellis bench comm` does.

Each of --ranks processes (torch.multiprocessing, one host, gloo over
loopback TCP) all-reduces the same fp32 tensor of --bytes. A repeat is
--warmup untimed all-reduces, a barrier, then --iters timed ones; its time
is the slowest rank's mean per all-reduce (trellis's definition). busbw is
2(n-1)/n * bytes / time. Prints one JSON object: every repeat's busbw and
their median.

Run with /usr/bin/python3 (torch 1.13 with gloo); `python3` may be a
shim without torch.

    /usr/bin/python3 scripts/bench_gloo.py --ranks 4 --bytes 67108864
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, out):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.ranks)
    x = torch.ones(args.bytes // 4, dtype=torch.float32)
    times = []
    for _ in range(args.repeats):
        for _ in range(args.warmup):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=int, default=64 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    for name in ("ranks", "iters", "repeats"):
        if getattr(args, name) < 1:
            sys.exit(f"bench_gloo: --{name}={getattr(args, name)} must be at least 1")
    if args.bytes < 4 or args.bytes % 4:
        sys.exit(f"bench_gloo: --bytes={args.bytes} must be a positive multiple of 4 (fp32)")
    if args.warmup < 0:
        sys.exit(f"bench_gloo: --warmup={args.warmup} must be at least 0")

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, out)) for r in range(args.ranks)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
        if pr.exitcode != 0:
            sys.exit(f"bench_gloo: a rank exited with status {pr.exitcode}")
    times = out.get()
    n = args.ranks
    busbw = [2 * (n - 1) / n * args.bytes / t / 1e9 for t in times]
    print(json.dumps({"backend": "gloo", "op": "allreduce", "ranks": n, "bytes": args.bytes,
                      "iters": args.iters, "time_s": times, "busbw_gbps": busbw,
                      "median_busbw_gbps": statistics.median(busbw),
                      "torch": __import__("torch").__version__}))


if __name__ == "__main__":
    main()
