"""ZeRO-1 on several GPUs, one process each (run by torch.distributed.run; multi-GPU issue): per rank, the adapter
it selected (``vulkan:<local rank>``), its state bytes, and the parts of a step on GPT-2 124M's shapes: the grads'
all-reduce through the host (gloo), the shard's optimizer step (wall, synchronised), the params' all-gather.

    torchrun --standalone --nproc_per_node=2 benchmarks/zero_bench.py [--set gpt2-124m] [--steps 3] [--json out]
"""
import argparse
import json
import os
import time

import torch  # noqa: F401  (before any wgpu device)
import torch.distributed as dist
import numpy as np

import rlx_gpu
from rlx_gpu.bench.shapes import param_set
from rlx_gpu.bench.timing import median
from rlx_gpu.distributed import ZeroRedundancyOptimizer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default=None, help="adapter selector (default vulkan:<LOCAL_RANK>)")
    ap.add_argument("--json")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sel = args.device or f"vulkan:{os.environ.get('LOCAL_RANK', rank)}"
    shapes = param_set(args.set)
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    zero = ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.AdamW, device=sel)
    grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes}
    dev = zero.inner.device
    t = {"all_reduce": [], "step": [], "all_gather": [], "total": []}
    flat = torch.from_numpy(zero._flat(grads))
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        f = flat.clone()
        dist.all_reduce(f)
        t1 = time.perf_counter()
        zero.inner.step({k: np.asarray(f.numpy()[zero._offsets[n] + s:zero._offsets[n] + e])
                         for k, (n, s, e) in zero._pieces.items()})
        dev.sync()
        t2 = time.perf_counter()
        zero._all_gather(np.concatenate([v.reshape(-1) for v in zero.inner.read_params().values()]))
        t3 = time.perf_counter()
        for k, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
            t[k].append(v * 1e3)
    out = {"rank": rank, "world": world, "adapter": dev.name, "selector": sel, "position": dev.position,
           "numel": zero.numel, "state_bytes": zero.memory()["state"],
           **{f"{k}_ms": median(v[1:]) for k, v in t.items()}}
    print(json.dumps(out), flush=True)
    if args.json:
        with open(args.json.replace(".json", f".rank{rank}.json"), "w") as fh:
            json.dump(out, fh, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
