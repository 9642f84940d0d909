"""What each row is compared with: torch's fastest implementation on the same shapes and dtype (CUDA, when torch
with CUDA is importable), CUDA's own copy and pinned transfers, the NumPy twin, the host path, the wall clock of
small steps, and the first-step latency of a fresh process."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time

import numpy as np

from .timing import median


def torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_step_ms(torch, shapes, opt_spec, repeats, dtype="float32") -> float:
    name, kw = opt_spec
    kw = dict(kw)
    clip = kw.pop("clip", None)
    scaler = torch.amp.GradScaler("cuda") if kw.pop("scaler", False) else None
    ps = [torch.zeros(s, device="cuda", dtype=getattr(torch, dtype)) + 0.01 for _, s in shapes]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    module, _, cls = name.rpartition(".")  # torch.optim's class, or module.Class of another library
    inner = getattr(importlib.import_module(module) if module else torch.optim, cls)(ps, lr=1e-3, **kw)
    if scaler is not None:
        scaler.scale(torch.ones(1, device="cuda"))  # torch's scaler makes its scale tensor here

    class _Opt:  # the step being timed: clip first, or through the scaler, where the row asks for it
        def step(self):
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(ps, clip, foreach=True)
            if scaler is not None:
                scaler.step(inner)
                scaler.update()
            else:
                inner.step()

    opt = _Opt()
    t = cuda_ms(torch, opt.step, repeats)
    opt = inner = None  # (the optimizer's state freed before the next row: ps with it)
    ps.clear()
    torch.cuda.empty_cache()
    return t


def cuda_ms(torch, fn, repeats: int, steps: int = 20, warmup: int = 3) -> float:
    """Milliseconds per call of ``fn`` on the CUDA stream (events around ``steps`` calls; median of ``repeats``)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(steps):
            fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / steps)
    return median(times)


def torch_copy_figures(torch, nbytes) -> dict:
    n = nbytes // 4
    a, b = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    dev_copy = 2 * nbytes * 20 / (s.elapsed_time(e) / 1e3) / 1e9
    host = torch.empty(n, pin_memory=True)
    h2d, d2h = [], []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        a.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        h2d.append(nbytes / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        host.copy_(a, non_blocking=True)
        torch.cuda.synchronize()
        d2h.append(nbytes / (time.perf_counter() - t0) / 1e9)
    del a, b, host
    torch.cuda.empty_cache()
    return {"cuda_copy_gbps": dev_copy, "torch_pinned_h2d_gbps": max(h2d), "torch_pinned_d2h_gbps": max(d2h)}


def first_step_latency(device_sel) -> dict:
    """Import, device, pipelines and a first AdamW step, timed in a fresh process."""
    code = (
        "import time; t0 = time.perf_counter(); import numpy as np, rlx_gpu; t1 = time.perf_counter();"
        f"d = rlx_gpu.get_device({device_sel!r}); t2 = time.perf_counter();"
        "o = rlx_gpu.AdamW({'w': np.ones(1024, np.float32)}, device=d); t3 = time.perf_counter();"
        "o.step({'w': np.ones(1024, np.float32)}); o.params['w'].numpy(); t4 = time.perf_counter();"
        "import json; print(json.dumps({'import_s': t1 - t0, 'device_s': t2 - t1, 'construct_and_pipelines_s': t3 - t2,"
        " 'first_step_s': t4 - t3, 'total_s': t4 - t0}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if r.returncode:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def host_path(dev, opt, shapes) -> dict:
    """Upload (grads from NumPy), download (params to NumPy) and a whole host step, in GB/s and ms."""
    grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes}
    nbytes = 4 * sum(int(np.prod(s)) for _, s in shapes)

    def upload():  # what step(grads) uploads, in one batched transfer per bucket
        opt.write_grads(grads)
        dev.sync()

    reuse = opt.read_params()
    res = {}
    for name, fn in (("upload", upload), ("download", opt.read_params),
                     ("download_reuse", lambda: opt.read_params(out=reuse)),
                     ("host_step", lambda: (opt.step(grads), opt.read_params()))):
        fn()
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        res[name] = min(ts)
    return {"upload_gbps": nbytes / res["upload"] / 1e9, "download_gbps": nbytes / res["download"] / 1e9,
            "download_reuse_gbps": nbytes / res["download_reuse"] / 1e9, "host_step_ms": res["host_step"] * 1e3}


def wall_ms(step, sync, steps: int, repeats: int) -> float:
    """Wall-clock milliseconds per call of ``step`` over ``steps`` calls, the device synchronised at the ends."""
    for _ in range(5):
        step()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        out.append((time.perf_counter() - t0) / steps)
    return median(out) * 1e3


def host_rows(dev, torch, repeats: int) -> list:
    """Host work per step: ``opt.step()`` on a model of 20 tensors and 1M parameters (the device grad slots),
    plain and checked (clip + skip_nonfinite), wall clock, against torch's fused AdamW (CUDA) in the same run."""
    import rlx_gpu
    shapes = [(f"t{i}", (50_000,)) for i in range(20)]
    params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
    rows = []
    for label, kw in (("adamw host step", {}),
                      ("adamw host step, checked", {"clip_grad_norm": 1.0, "skip_nonfinite": True})):
        opt = rlx_gpu.AdamW(params, lr=1e-3, device=dev, **kw)
        for n, s in shapes:
            opt.grads[n].write(np.full(s, 1e-3, np.float32))
        ms = wall_ms(opt.step, lambda o=opt: o.last_step_skipped or dev.sync(), 200, repeats)
        rows.append({"what": label, "tensors": 20, "numel": 1_000_000, "wall_ms_per_step": ms})
    if torch is not None:
        ps = [torch.zeros(s, device="cuda") + 0.01 for _, s in shapes]
        for p in ps:
            p.grad = torch.full_like(p, 1e-3)
        tor = torch.optim.AdamW(ps, lr=1e-3, fused=True)
        ms = wall_ms(tor.step, torch.cuda.synchronize, 200, repeats)
        for r in rows:
            r["torch_wall_ms"] = ms
            r["ratio_vs_torch"] = ms / r["wall_ms_per_step"]
    rows[1]["vs_plain"] = rows[1]["wall_ms_per_step"] / rows[0]["wall_ms_per_step"]
    return rows


def numpy_ms(cls, params, kw, grads, repeats) -> float:
    """The NumPy twin's step on ``grads`` in milliseconds (median)."""
    twin = cls(params, lr=1e-3, **kw)
    twin.step(grads)
    ts = []
    for _ in range(max(1, min(repeats, 3))):
        t0 = time.perf_counter()
        twin.step(grads)
        ts.append(time.perf_counter() - t0)
    return median(ts) * 1e3


def matrix_bench_setup(doc: str, extra=None):
    """The common start of the matrix benches (benchmarks/muon_bench.py, stiefel_bench.py): ``--rounds``,
    ``--div`` (shrink the matrices: a smoke run), ``--json`` and ``extra(parser)``'s own arguments, then the
    default adapter, its GPU-timestamp timer and torch on CUDA (None without it): (args, device, timer, torch)."""
    import argparse

    import rlx_gpu
    from ..cli import describe
    from .timing import Timer
    ap = argparse.ArgumentParser(description=describe(doc))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--div", type=int, default=1, help="shrink the matrices by this factor (a smoke run)")
    ap.add_argument("--json")
    if extra is not None:
        extra(ap)
    args = ap.parse_args()
    dev = rlx_gpu.get_device()
    return args, dev, Timer(dev), torch_cuda()
