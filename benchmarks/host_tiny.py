"""Host work per step with negligible kernels (so a CPU adapter measures the host path, not its own kernels): AdamW
on 20 tensors of 64 elements (grads in the device slots), plain and checked, wall clock per step over 200 steps with
a sync at the end, median of 7 repeats; one JSON line. On the implementation and options of the environment:
    RLX_GPU_IMPLEMENTATION=dawn RLX_GPU_DAWN_SKIP_VALIDATION=1 python benchmarks/host_tiny.py"""
import json
import statistics
import time

import numpy as np

import rlx_gpu

d = rlx_gpu.get_device()
out = {"implementation": d.implementation, "skip_validation": d.skip_validation}
for label, kw in (("plain", {}), ("checked", {"clip_grad_norm": 1.0, "skip_nonfinite": True})):
    params = {f"t{i}": np.full(64, 0.01, np.float32) for i in range(20)}
    o = rlx_gpu.AdamW(params, device=d, **kw)
    for n in params:
        o.grads[n].write(np.full(64, 1e-3, np.float32))
    for _ in range(50):
        o.step()
    d.sync()
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(200):
            o.step()
        d.sync()
        ts.append((time.perf_counter() - t0) / 200 * 1e3)
    out[label] = statistics.median(ts)
print(json.dumps(out))
