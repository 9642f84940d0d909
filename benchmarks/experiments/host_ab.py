"""Host work of a small step, for whichever rlx_gpu is first on the path (run it from two checkouts in turn):
AdamW on 20 tensors of 50,000, plain and checked (clip + skip_nonfinite): wall clock per step over 200 steps, and
the same loop with the queue's submit and write_buffer stubbed out (the Python alone).
    PYTHONPATH=CHECKOUT python benchmarks/experiments/host_ab.py LABEL"""
import sys
import time

import numpy as np

import rlx_gpu

dev = rlx_gpu.get_device()
shapes = [(f"t{i}", (50_000,)) for i in range(20)]
params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}


def per_step(opt, steps=200, repeats=5):
    best = 1e9
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            opt.step()
        opt.last_step_skipped
        dev.sync()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best * 1e3


for label, kw in (("plain", {}), ("checked", {"clip_grad_norm": 1.0, "skip_nonfinite": True})):
    opt = rlx_gpu.AdamW(params, lr=1e-3, device=dev, **kw)
    for n, s in shapes:
        opt.grads[n].write(np.full(s, 1e-3, np.float32))
    for _ in range(10):
        opt.step()
    wall = per_step(opt)
    q = dev.queue
    real = q.submit, q.write_buffer
    q.submit, q.write_buffer = (lambda *a, **k: None), (lambda *a, **k: None)
    try:
        py = per_step(opt) if label == "plain" else float("nan")  # (a checked step waits on outcomes never made)
    finally:
        q.submit, q.write_buffer = real
    print(f"{sys.argv[1] if len(sys.argv) > 1 else ''} {label}: wall {wall:.3f} ms/step, "
          f"without submit/write_buffer {py:.3f} ms/step", flush=True)
