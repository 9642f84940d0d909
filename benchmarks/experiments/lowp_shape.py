"""Workgroup shape x precision for the elementwise driver with every load hoisted before the stores (PERF_NOTES
30): AdamW (and a few others at the default shape) on GPT-2 124M, torch's fused AdamW in the same dtype alongside.
The figures in PERF_NOTES 30 were made with that driver, which was not kept; the script now times the current
one (the WG/EPT sweep still applies).
    python benchmarks/experiments/lowp_shape.py [optimizer ...]"""
import os
import sys

import numpy as np

import rlx_gpu
from rlx_gpu.tools.bench import Timer, param_set
from rlx_gpu.tools.bench.baselines import torch_cuda, torch_step_ms
from rlx_gpu.tools.bench.shapes import OPTIMIZERS, PRECISIONS, min_bytes
from rlx_gpu.core.lowp import DTYPES

dev = rlx_gpu.get_device()
timer = Timer(dev)
torch = torch_cuda()
shapes = param_set(os.environ.get("SET", "gpt2-124m"))


def time_it(cls, kw, prec):
    pd, gd, sd, master = PRECISIONS[prec]
    params = {n: np.full(s, 0.01, np.float32).astype(DTYPES[pd].np) for n, s in shapes}
    o = cls(params, lr=1e-3, state_dtype=sd, master_weights=master, device=dev, **kw)
    for n, s in shapes:
        o.grads[n].write(np.full(s, 1e-3, np.float32).astype(DTYPES[gd].np))
    for _ in range(3):
        o.step()
    t, _ = timer.measure(o.step, 40, 5)
    del o
    return t


for prec in ("fp32", "bf16", "bf16-master", "f16"):
    tt = torch_step_ms(torch, shapes, ("AdamW", {"fused": True}), 5, PRECISIONS[prec][0]) \
        if torch is not None and not PRECISIONS[prec][3] else None
    for wg, ept in ((256, 2), (256, 4), (128, 4), (512, 2), (128, 8), (64, 8), (512, 4)):
        cls = type("AdamW", (rlx_gpu.AdamW,), {"WG": wg, "EPT": ept})
        t = time_it(cls, {}, prec)
        gbps = min_bytes("adamw", prec, shapes) / t / 1e9
        print(f"adamw {prec} wg {wg} ept {ept}: {t * 1e3:.3f} ms {gbps:.0f} GB/s"
              + (f" torch {tt:.3f} ms ({tt / (t * 1e3):.2f}x)" if tt else ""), flush=True)
for name in sys.argv[1:]:
    cls_name, kw, _, _ = OPTIMIZERS[name]
    for prec in ("fp32", "bf16"):
        t = time_it(getattr(rlx_gpu, cls_name), {k: v for k, v in kw.items() if k != "scaler"}, prec)
        print(f"{name} {prec}: {t * 1e3:.3f} ms {min_bytes(name, prec, shapes) / t / 1e9:.0f} GB/s", flush=True)
