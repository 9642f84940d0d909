"""NCCL's dense float32 all-reduce between the GPUs of one host (torch on CUDA), the baseline of the multi-GPU
issue's exchange figures: median ms over 5 (after 2 warm-ups) for each element count given.

    torchrun --standalone --nproc_per_node=2 benchmarks/nccl_allreduce.py 124439808 1557611200
"""
import json
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
out = {}
for n in map(int, sys.argv[1:]):
    x = torch.ones(n, device="cuda")
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        dist.all_reduce(x)
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    out[n] = sorted(ts[2:])[2]
    del x
if rank == 0:
    print(json.dumps({"nccl_all_reduce_ms": out}))
dist.destroy_process_group()
