"""One rank of tests/test_distributed.py's training task (run by torch.distributed.run): least squares on this rank's
own 2,048 samples (64 inputs, 32 outputs, noise 0.1), SGD with momentum through ZeRO-1, with or without top-k
compression; rank 0 writes the final mean squared error over every rank's data to <out>.
Arguments: out, steps, top-k ratio (0: uncompressed)."""
import sys

import torch  # noqa: F401  (before any wgpu device)
import torch.distributed as dist
import numpy as np

import rlx_gpu
from rlx_gpu.compression import TopK
from rlx_gpu.distributed import ZeroRedundancyOptimizer

out, steps, ratio = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
D, OUT, B = 64, 32, 64
w_true = (rng.standard_normal((D, OUT)) / 8).astype(np.float32)
data = []
for _ in range(world):
    x = rng.standard_normal((2048, D)).astype(np.float32)
    data.append((x, x @ w_true + (0.1 * rng.standard_normal((2048, OUT))).astype(np.float32)))
zero = ZeroRedundancyOptimizer({"w": np.zeros((D, OUT), np.float32), "b": np.zeros(OUT, np.float32)},
                               optimizer_class=rlx_gpu.SGD, lr=0.05, momentum=0.9,
                               grad_compression=TopK(ratio) if ratio else None)
x, y = data[rank]
for s in range(steps):
    i = np.random.default_rng(1000 * s + rank).integers(0, len(x), B)
    e = x[i] @ zero.params["w"] + zero.params["b"] - y[i]
    zero.step({"w": (x[i].T @ e * (2 / (B * OUT))).astype(np.float32), "b": (e.mean(0) * (2 / OUT)).astype(np.float32)})
if rank == 0:
    mse = np.mean([np.mean((a @ zero.params["w"] + zero.params["b"] - t) ** 2) for a, t in data])
    np.save(out, np.array(mse))
dist.destroy_process_group()
