"""ZeRO-1 on several GPUs, one process each (run by torch.distributed.run; multi-GPU issue). Per rank and param set:
the adapter it selected (``vulkan:<local rank>``); the optimizer step alone (grads already in the device slots) of
the rank's shard against the single-GPU optimizer over every tensor on the same GPU, and their state bytes; a whole
ZeRO step uncompressed and with top-k compression, each part timed (``zero.profile``: the device synchronised
between parts): for the uncompressed one the grads' download from the device (timed on an arena of the model's
size), the host reduce-scatter (over gloo an all-reduce: rlx_gpu.addons.distributed.net), the shard's upload and step, the
params' download and all-gather; for top-k the selection and the lists' download, their all-gather, the upload and
rebuild of the mean, the step, the params.

    python benchmarks/zero_bench.py --sets gpt2-124m,gpt2-1.5b@1 --json out.json     # launches 2 ranks (--nproc)
    torchrun --standalone --nproc_per_node=2 benchmarks/zero_bench.py ...               # the same, by hand
"""
import argparse
import gc
import json
import os
import time

import torch  # noqa: F401  (before any wgpu device)
import torch.distributed as dist
import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe
from rlx_gpu.tools.bench.shapes import param_set
from rlx_gpu.tools.bench.timing import median
from rlx_gpu.compression import TopK
from rlx_gpu.core.lowp import F32
from rlx_gpu.distributed import ZeroRedundancyOptimizer
from rlx_gpu.runtime.arena import Arena
from rlx_gpu.runtime.layout import Layout


def step_ms(opt, steps):
    """Median wall time of ``opt.step()`` on the grads in its device slots, the device synchronised."""
    out = []
    for _ in range(steps + 1):
        opt.device.sync()
        t = time.perf_counter()
        opt.step()
        opt.device.sync()
        out.append(1e3 * (time.perf_counter() - t))
    return median(out[1:])


def zero_parts(zero, grads, steps):
    """Median of each part of ``steps`` profiled ZeRO steps (after one warm-up) and of their sum."""
    zero.profile = True
    rows = []
    for _ in range(steps + 1):
        zero.step(grads)
        rows.append(dict(zero.timings, total=sum(zero.timings.values())))
    return {k: median([r[k] for r in rows[1:]]) for k in rows[0]}


def note(rank, what):
    if rank == 0:
        print(f"[{time.strftime('%H:%M:%S')}] {what}", flush=True)


def one_set(name, sel, steps, ratio, rank):
    note(rank, f"{name}: making params and grads")
    shapes = param_set(name)
    rng = np.random.default_rng(rank)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    grads = {n: (rng.random(int(np.prod(s)), dtype=np.float32) - 0.5).reshape(s) for n, s in shapes}
    out = {"set": name, "numel": int(sum(a.size for a in params.values()))}
    full = rlx_gpu.AdamW(params, device=sel)  # the single-GPU optimizer over every tensor, on this rank's GPU
    dev = full.device
    full.write_grads(grads)
    out["single_step_ms"] = step_ms(full, steps)
    out["single_state_bytes"] = full.memory()["state"]
    del full
    gc.collect()
    note(rank, f"{name}: single-GPU step {out['single_step_ms']:.2f} ms")
    zero = ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, device=sel)
    flat = np.concatenate([grads[n].reshape(-1) for n in params])
    zero.inner.write_grads({k: zero._piece(k, flat) for k in zero._pieces})
    del flat
    out["shard_step_ms"] = step_ms(zero.inner, steps)
    out["shard_state_bytes"] = zero.memory()["state"]
    out["step_ratio"] = out["shard_step_ms"] / out["single_step_ms"]
    out["state_ratio"] = out["shard_state_bytes"] / out["single_state_bytes"]
    lay = Layout([a.size for a in params.values()], alignment=dev.alignment, max_binding=dev.max_storage_binding,
                 block=4096)
    arena = Arena(dev, lay, "bench.grads", F32)  # (the grads on the device: their download is part of the exchange)
    host = [np.empty(n, np.float32) for n in lay.chunk_elems]
    t = []
    for _ in range(steps + 1):
        dev.sync()
        t0 = time.perf_counter()
        arena.device.transfer.download([(b, 0, h.view(np.uint8)) for b, h in zip(arena.buffers, host)])
        t.append(1e3 * (time.perf_counter() - t0))
    del arena, host
    note(rank, f"{name}: shard step {out['shard_step_ms']:.2f} ms; uncompressed ZeRO steps")
    out["uncompressed"] = {"download_grads": median(t[1:]), **zero_parts(zero, grads, steps)}
    out["uncompressed"]["exchange"] = out["uncompressed"]["download_grads"] + out["uncompressed"]["reduce_scatter"]
    out["uncompressed"]["has_reduce_scatter"] = zero._net.has_reduce_scatter
    del zero
    gc.collect()
    note(rank, f"{name}: uncompressed {out['uncompressed']['total']:.1f} ms; top-k ZeRO steps")
    zc = ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, device=sel, grad_compression=TopK(ratio))
    zc._comp.write(grads)
    parts = zero_parts(zc, None, steps)
    parts["exchange"] = parts["select"] + parts["download_lists"] + parts["all_gather_lists"] + parts["upload_and_rebuild"]
    out[f"topk_{ratio}"] = dict(parts, K=zc._comp.K)
    del zc
    gc.collect()
    return out


def main():
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--sets", default="gpt2-124m", help="comma-separated param sets, each with @steps to override")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--topk", type=float, default=0.01)
    ap.add_argument("--device", default=None, help="adapter selector (default vulkan:<LOCAL_RANK>)")
    ap.add_argument("--json")
    ap.add_argument("--nproc", type=int, default=2, help="ranks to launch when not started by torchrun")
    args = ap.parse_args()
    if "LOCAL_RANK" not in os.environ:  # (started by hand: launch the ranks through torch.distributed.run)
        import subprocess
        import sys
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
               __file__, *sys.argv[1:]]
        raise SystemExit(subprocess.call(cmd))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sel = args.device or f"vulkan:{os.environ.get('LOCAL_RANK', rank)}"
    dev = rlx_gpu.get_device(sel)
    res = {"rank": rank, "world": world, "adapter": dev.name, "selector": sel, "position": dev.position, "sets": []}
    for spec in args.sets.split(","):  # (written after each set: a long one cut short keeps the others)
        name, _, n = spec.partition("@")
        res["sets"].append(one_set(name, sel, int(n) if n else args.steps, args.topk, rank))
        print(json.dumps(res["sets"][-1]), flush=True)
        if args.json:
            with open(args.json.replace(".json", f".rank{rank}.json"), "w") as fh:
                json.dump(res, fh, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
