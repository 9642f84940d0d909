"""The torch drop-in's wall clock per step: ``rlx_gpu.AdamW(model.parameters())`` stepping CPU torch tensors from
their ``.grad`` (grads uploaded, the step, the new values written into the tensors: what ``opt.step()`` costs a
torch user), against the NumPy API on the same tensors (``step(grads)`` then ``read_params(out=)``) and against
torch.optim.AdamW (fused, on the CPU tensors). Contiguous params, and the same set made non-contiguous (every
2-D tensor transposed: the write-back through one copy).

    python benchmarks/torch_dropin.py --set gpt2-124m --steps 50 [--json out.json]

Prints ms per step (median of ``--steps`` after 5 warm-up steps) per row.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch  # (before any wgpu device: docs/guides/pytorch.md, "Import order")
import torch.optim  # noqa: F401

import numpy as np
import rlx_gpu
from rlx_gpu.tools.bench.shapes import param_set


def tensors(shapes, strided: bool):
    g = torch.Generator().manual_seed(0)
    out = []
    for s in shapes:
        t = torch.randn(tuple(s[::-1]) if strided and len(s) == 2 else tuple(s), generator=g)
        t = torch.nn.Parameter(t.t() if strided and len(s) == 2 else t)
        t.grad = torch.randn(t.shape, generator=g) * 1e-3
        out.append(t)
    return out


def timed(step, n: int) -> float:
    for _ in range(5):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", default="gpt2-124m", help="a param set of rlx-gpu bench (single:N, gpt2-124m, ...)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    shapes = [tuple(int(d) for d in s) for _, s in param_set(args.set)]
    rows = {}
    for strided in (False, True):
        ps = tensors(shapes, strided)
        opt = rlx_gpu.AdamW(ps, lr=1e-4)
        rows[f"rlx_gpu.AdamW(model.parameters()).step(){' strided' if strided else ''}"] = timed(opt.step, args.steps)
        ref = torch.optim.AdamW(ps, lr=1e-4, fused=True)
        rows[f"torch.optim.AdamW(fused=True) on the CPU{' strided' if strided else ''}"] = timed(ref.step, args.steps)
    arrays = {str(i): np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    grads = {n: a * np.float32(1e-3) for n, a in arrays.items()}
    np_opt = rlx_gpu.AdamW(arrays, lr=1e-4)
    out = {n: np.empty_like(a) for n, a in arrays.items()}
    rows["NumPy API: step(grads) + read_params(out=)"] = timed(lambda: (np_opt.step(grads), np_opt.read_params(out=out)),
                                                               args.steps)
    report = {"set": args.set, "tensors": len(shapes), "params": int(sum(np.prod(s) for s in shapes)),
              "adapter": np_opt.device.name, "ms_per_step": rows}
    for k, v in rows.items():
        print(f"{v:9.2f} ms  {k}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
