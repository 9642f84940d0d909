"""``rlx-gpu bench``: every optimizer against the memory-bandwidth floor, torch and its NumPy twin, in one run.

For each optimizer x param set it measures the GPU time per step (timestamp queries where the adapter has
them, else synchronised wall clock), the bytes the algorithm must move at least, the effective GB/s and
its fraction of the device's copy bandwidth measured in the same run; torch's fastest implementation on
the same shapes when torch with CUDA is importable; the NumPy twin; and the host path (upload, download,
a step with NumPy grads whose params are read back).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

from . import kernels
from .device import NoAdapterError, get_device

# name -> (class name, options, minimum bytes per element (or a function of the tensor shape), torch optimizer
# and options or None)
OPTIMIZERS = {
    "adamw": ("AdamW", {}, 28, ("AdamW", {"fused": True})),
    "adam": ("Adam", {}, 28, ("Adam", {"fused": True})),
    "sgd": ("SGD", {"momentum": 0.9}, 20, ("SGD", {"momentum": 0.9, "fused": True})),
    "rmsprop": ("RMSprop", {}, 20, ("RMSprop", {"foreach": True})),
    "adagrad": ("Adagrad", {}, 20, ("Adagrad", {"foreach": True})),
    # LAMB's own minimum is AdamW's 28 bytes; its three passes move 40 (see BENCHMARKS.md).
    "lamb": ("LAMB", {}, 28, None),
    "nadamw": ("NAdamW", {}, 28, ("NAdam", {"foreach": True, "decoupled_weight_decay": True})),
    "radam": ("RAdam", {}, 28, ("RAdam", {"foreach": True})),
    "qhadamw": ("QHAdamW", {"nus": (0.7, 1.0)}, 28, None),
    "lion": ("Lion", {}, 20, None),
    "sophiah": ("SophiaH", {}, 24, None),          # p, m read+write; g and the Hessian EMA read
    "mars": ("Mars", {}, 36, None),                # p, m, v, g_prev read+write; g read
    # p read+write, g read; an unfactored tensor (< 2 dims) also reads and writes its second moment: 20 B
    "adafactor": ("Adafactor", {}, lambda shape: 12 if len(shape) >= 2 else 20, ("Adafactor", {"foreach": True})),
    # AdamW with the global-norm clip folded in: one more read of g. torch: clip_grad_norm_(foreach) + fused AdamW.
    "adamw+clip": ("AdamW", {"clip_grad_norm": 1.0}, 32, ("AdamW", {"fused": True, "clip": 1.0})),
    # AdamW stepped through GradScaler: the inf/NaN check reads g once more, the skip is decided on the device.
    # torch: GradScaler + fused AdamW (its found_inf goes into the fused kernel; no sync either).
    "adamw+scaler": ("AdamW", {"scaler": True}, 32, ("AdamW", {"fused": True, "scaler": True})),
}
DEFAULT_SETS = "single:67108864,gpt2-124m,gpt2-1.5b"
# WGSL copy-kernel variants (workgroup size, vec4s per thread) timed for the copy bandwidth.
COPY_VARIANTS = ((256, 4), (256, 1), (128, 2), (512, 4))


def gpt2_shapes(n_layer: int, d: int, vocab: int = 50257, ctx: int = 1024) -> list:
    shapes = [("wte", (vocab, d)), ("wpe", (ctx, d))]
    for i in range(n_layer):
        h = f"h{i}."
        shapes += [(h + "ln_1.weight", (d,)), (h + "ln_1.bias", (d,)),
                   (h + "attn.c_attn.weight", (d, 3 * d)), (h + "attn.c_attn.bias", (3 * d,)),
                   (h + "attn.c_proj.weight", (d, d)), (h + "attn.c_proj.bias", (d,)),
                   (h + "ln_2.weight", (d,)), (h + "ln_2.bias", (d,)),
                   (h + "mlp.c_fc.weight", (d, 4 * d)), (h + "mlp.c_fc.bias", (4 * d,)),
                   (h + "mlp.c_proj.weight", (4 * d, d)), (h + "mlp.c_proj.bias", (d,))]
    return shapes + [("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


def param_set(spec: str) -> list:
    if spec.startswith("single:"):
        raw = spec.split(":", 1)[1]
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"bench: single:N needs a whole number of elements >= 1, got {raw!r}")
        return [("w", (n,))]
    if spec == "gpt2-124m":
        return gpt2_shapes(12, 768)
    if spec == "gpt2-1.5b":
        return gpt2_shapes(48, 1600)
    raise ValueError(f"bench: unknown param set {spec!r}; use single:N, gpt2-124m or gpt2-1.5b")


def scale_shapes(shapes: list, f: float) -> list:
    """Every tensor shrunk to ``f`` of its size (flattened), keeping the tensor count."""
    return [(n, (max(1, int(np.prod(s) * f)),)) for n, s in shapes]


def _median(xs):
    return float(statistics.median(xs))


class Timer:
    """GPU time between two points of the queue (timestamp queries), else wall clock after a sync."""

    def __init__(self, dev, slots: int = 64):
        self.dev = dev
        self.gpu = "timestamp-query" in dev.features
        if self.gpu:
            u = dev.wgpu.BufferUsage
            self.qs = dev.device.create_query_set(type="timestamp", count=slots)
            self.resolve = dev.device.create_buffer(size=8 * slots, usage=u.QUERY_RESOLVE | u.COPY_SRC)
            self.slots = slots

    def _mark(self, idx: int):
        enc = self.dev.device.create_command_encoder()
        p = enc.begin_compute_pass(timestamp_writes={"query_set": self.qs, "beginning_of_pass_write_index": idx})
        p.end()
        self.dev.submit(enc)

    def measure(self, fn, steps: int, repeats: int) -> tuple[float, float]:
        """(GPU-or-wall seconds per call, wall seconds per call): medians over ``repeats`` runs of ``steps`` calls."""
        gpu_t, wall_t = [], []
        for r in range(repeats):
            self.dev.sync()
            t0 = time.perf_counter()
            if self.gpu:
                self._mark(2 * r)
            for _ in range(steps):
                fn()
            if self.gpu:
                self._mark(2 * r + 1)
            self.dev.sync()
            wall_t.append((time.perf_counter() - t0) / steps)
        if self.gpu:
            enc = self.dev.device.create_command_encoder()
            enc.resolve_query_set(self.qs, 0, 2 * repeats, self.resolve, 0)
            self.dev.submit(enc)
            ticks = self.dev.read(self.resolve, 0, 16 * repeats).view(np.uint64).astype(np.float64)
            gpu_t = list((ticks[1::2] - ticks[0::2]) * 1e-9 / steps)  # wgpu reports nanoseconds
        return _median(gpu_t or wall_t), _median(wall_t)


def _steps_for(seconds_per_step: float, target: float = 0.05) -> int:
    return int(min(200, max(3, target / max(seconds_per_step, 1e-6))))


def copy_bandwidth(dev, timer, nbytes: int, repeats: int) -> dict:
    """GB/s of a buffer-to-buffer copy and of WGSL copy kernels over ``nbytes``; bytes counted read + write."""
    nbytes = min(nbytes, dev.max_storage_binding) // 16 * 16
    a, b = dev.buffer(nbytes, "bench.src"), dev.buffer(nbytes, "bench.dst")
    out = {}

    def buffer_copy():
        enc = dev.device.create_command_encoder()
        enc.copy_buffer_to_buffer(a, 0, b, 0, nbytes)
        dev.submit(enc)

    buffer_copy()
    t, _ = timer.measure(buffer_copy, 3, 1)
    t, _ = timer.measure(buffer_copy, _steps_for(t), repeats)
    out["buffer_copy"] = 2 * nbytes / t / 1e9
    for wg, ept in COPY_VARIANTS:
        if wg > dev.limits["max-compute-invocations-per-workgroup"]:
            continue
        k = kernels.get_kernel(dev, "copy.wgsl", "copy", WG=wg, EPT=ept)
        bg = k.bind({"src": a, "dst": b})
        groups = -(-(nbytes // 16) // (wg * ept))

        def kern():
            enc = dev.device.create_command_encoder()
            k.dispatch(enc, bg, groups)
            dev.submit(enc)

        kern()
        t, _ = timer.measure(kern, 3, 1)
        t, _ = timer.measure(kern, _steps_for(t), repeats)
        out[f"wgsl_copy_wg{wg}_ept{ept}"] = 2 * nbytes / t / 1e9
    a.destroy()
    b.destroy()
    return out


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_step_ms(torch, shapes, opt_spec, repeats) -> float:
    name, kw = opt_spec
    kw = dict(kw)
    clip = kw.pop("clip", None)
    scaler = torch.amp.GradScaler("cuda") if kw.pop("scaler", False) else None
    ps = [torch.zeros(s, device="cuda") + 0.01 for _, s in shapes]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    inner = getattr(torch.optim, name)(ps, lr=1e-3, **kw)
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
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    times = []
    steps = 20
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(steps):
            opt.step()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / steps)
    del opt, inner, ps
    torch.cuda.empty_cache()
    return _median(times)


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


def host_path(dev, opt, shapes, timer) -> dict:
    """Upload (grads from NumPy), download (params to NumPy) and a whole host step, in GB/s and ms."""
    grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes}
    nbytes = 4 * sum(int(np.prod(s)) for _, s in shapes)

    def upload():
        opt._grad.write_many([(opt._index[n], g) for n, g in grads.items()])  # what step(grads) does
        dev.sync()

    def download():
        opt.read_params()

    reuse = opt.read_params()

    def download_reuse():
        opt.read_params(out=reuse)

    def host_step():
        opt.step(grads)
        download()

    res = {}
    for name, fn in (("upload", upload), ("download", download), ("download_reuse", download_reuse),
                     ("host_step", host_step)):
        fn()
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        res[name] = min(ts)
    return {"upload_gbps": nbytes / res["upload"] / 1e9, "download_gbps": nbytes / res["download"] / 1e9,
            "download_reuse_gbps": nbytes / res["download_reuse"] / 1e9, "host_step_ms": res["host_step"] * 1e3}


def default_budget(dev) -> float:
    """Bytes of device memory the bench may use (CPU adapters share host RAM)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 16 << 30
    return 0.25 * ram if dev.info["type"] == "CPU" else 64e9


def run(args) -> dict:
    import rlx_gpu
    dev = get_device(args.device)
    timer = Timer(dev)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    say(f"bench: {dev.name} ({dev.info['backend']}, {dev.info['type']}), timing by "
        f"{'GPU timestamp queries' if timer.gpu else 'wall clock'}")
    torch = None if args.no_torch else _torch_cuda()
    copies = copy_bandwidth(dev, timer, args.copy_mb << 20, args.repeats)
    copy_gbps = max(copies.values())
    say("copy bandwidth: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in copies.items()))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "adapter": dev.name, "backend": dev.info["backend"], "adapter_type": dev.info["type"],
        "driver": dev.info["driver"], "timing": "gpu-timestamps" if timer.gpu else "wall-clock",
        "versions": {"rlx_gpu": rlx_gpu.__version__, "python": platform.python_version(), "numpy": np.__version__,
                     "wgpu": __import__("wgpu").__version__, "torch": getattr(torch, "__version__", None)},
        "host": platform.node(), "copy_gbps": copy_gbps, "copy_variants_gbps": copies,
        "cuda_copy_gbps": None, "torch_pinned_h2d_gbps": None, "torch_pinned_d2h_gbps": None,
    }
    if torch is not None:
        meta.update(torch_copy_figures(torch, args.copy_mb << 20))
        meta["torch_device"] = torch.cuda.get_device_name()
    if not args.no_latency:
        meta["first_step_latency"] = first_step_latency(args.device)
    budget = args.memory_gb * 1e9 if args.memory_gb else default_budget(dev)
    if args.tune:
        meta["tune"] = tune(dev, timer, args, say)
    rows = []
    names = [o.strip().lower() for o in args.optimizers.split(",") if o.strip()]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    for o in names:
        if o not in OPTIMIZERS:
            raise SystemExit(f"bench: unknown optimizer {o!r}; choose from {', '.join(OPTIMIZERS)}")
    total, done = len(names) * len(sets), 0
    for sname in sets:
        base = param_set(sname)
        for oname in names:
            done += 1
            cls_name, kw, bytes_per, torch_spec = OPTIMIZERS[oname]
            spec = getattr(rlx_gpu.reference, cls_name)
            kw = dict(kw)
            scaler = rlx_gpu.GradScaler() if kw.pop("scaler", False) else None
            nstate = len(spec.state_names({**spec.defaults, **{k: v for k, v in kw.items() if k in spec.defaults}}))
            numel0 = sum(int(np.prod(s)) for _, s in base)
            need = numel0 * 4 * (2 + nstate) * 1.1
            scale = min(1.0, budget / need)
            shapes = base if scale >= 1.0 else scale_shapes(base, scale)
            numel = sum(int(np.prod(s)) for _, s in shapes)
            say(f"[{done}/{total}] {oname} on {sname}: {len(shapes)} tensors, {numel:,} params"
                + (f" (scaled to {scale:.3g} of {numel0:,}: the adapter's memory budget is {budget / 1e9:.1f} GB)"
                   if scale < 1 else ""))
            params = {n: np.full(s, 0.01, np.float32) for n, s in shapes}
            opt = getattr(rlx_gpu, cls_name)(params, lr=1e-3, **kw, device=dev)
            for n, s in shapes:
                opt.grads[n].write(np.full(s, 1e-3, np.float32))
            step = opt.step
            if scaler is not None:
                def step(opt=opt):
                    scaler.step(opt)
                    scaler.update()
            for _ in range(3):
                step()
            t, _ = timer.measure(step, 2, 1)
            t, wall = timer.measure(step, _steps_for(t), args.repeats)
            moved = sum((bytes_per(s) if callable(bytes_per) else bytes_per) * int(np.prod(s)) for _, s in shapes)
            row = {"optimizer": oname, "param_set": sname, "numel": numel, "tensors": len(shapes),
                   "scaled": None if scale >= 1 else scale, "ms_per_step": t * 1e3, "wall_ms_per_step": wall * 1e3,
                   "bytes_per_step": moved, "gbps": moved / t / 1e9, "copy_gbps": copy_gbps,
                   "frac_of_copy": moved / t / 1e9 / copy_gbps, "torch_ms": None, "torch_impl": None,
                   "ratio_vs_torch": None, "numpy_ms": None, "ratio_vs_numpy": None, "adapter": dev.name}
            if oname == "adamw" and not args.no_host:
                row.update(host_path(dev, opt, shapes, timer))
            del opt
            if torch is not None and torch_spec is not None:
                row["torch_ms"] = torch_step_ms(torch, shapes, torch_spec, args.repeats)
                row["torch_impl"] = (("clip_grad_norm_(foreach=True) + " if "clip" in torch_spec[1] else "")
                                     + ("GradScaler + " if "scaler" in torch_spec[1] else "")
                                     + f"{torch_spec[0]}({', '.join(f'{k}={v}' for k, v in torch_spec[1].items() if k not in ('clip', 'scaler'))})")
                row["ratio_vs_torch"] = row["torch_ms"] / row["ms_per_step"]
            if not args.no_numpy and numel <= args.numpy_max:
                twin = getattr(rlx_gpu.reference, cls_name)(params, lr=1e-3, **kw)
                grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes}
                twin.step(grads)
                ts = []
                for _ in range(max(1, min(args.repeats, 3))):
                    t0 = time.perf_counter()
                    twin.step(grads)
                    ts.append(time.perf_counter() - t0)
                row["numpy_ms"] = _median(ts) * 1e3
                row["ratio_vs_numpy"] = row["numpy_ms"] / row["ms_per_step"]
                del twin
            del params
            rows.append(row)
            say(f"      {row['ms_per_step']:.3f} ms/step, {row['gbps']:.1f} GB/s = {row['frac_of_copy']:.2f} of copy"
                + (f", torch {row['torch_ms']:.3f} ms ({row['ratio_vs_torch']:.2f}x)" if row["torch_ms"] else "")
                + (f", numpy {row['numpy_ms']:.1f} ms ({row['ratio_vs_numpy']:.1f}x)" if row["numpy_ms"] else ""))
    return dict(meta, rows=rows)


def tune(dev, timer, args, say) -> list:
    """AdamW on one tensor of ``--tune`` elements for several (workgroup size, vec4s per thread)."""
    import rlx_gpu
    n = args.tune
    params = {"w": np.full(n, 0.01, np.float32)}
    out = []
    for wg, ept in ((64, 4), (128, 1), (128, 2), (128, 4), (256, 1), (256, 2), (256, 4), (512, 1), (512, 2), (1024, 1)):
        cls = type("AdamW", (rlx_gpu.AdamW,), {"WG": wg, "EPT": ept})
        opt = cls(params, device=dev)
        opt.grads["w"].write(np.full(n, 1e-3, np.float32))
        opt.step()
        t, _ = timer.measure(opt.step, 2, 1)
        t, _ = timer.measure(opt.step, _steps_for(t), args.repeats)
        out.append({"wg": wg, "ept": ept, "ms_per_step": t * 1e3, "gbps": 28 * n / t / 1e9})
        say(f"tune adamw wg {wg} ept {ept}: {t * 1e3:.3f} ms, {28 * n / t / 1e9:.1f} GB/s")
        del opt
    return out


def table(report: dict) -> str:
    head = ["optimizer", "param set", "tensors", "params", "ms/step", "GB/s", "of copy", "torch ms", "vs torch",
            "numpy ms", "vs numpy"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for r in report["rows"]:
        lines.append(" | ".join([
            r["optimizer"], r["param_set"] + (f" (x{r['scaled']:.2g})" if r.get("scaled") else ""), str(r["tensors"]),
            f"{r['numel']:,}", f(r["ms_per_step"], ".3f"), f(r["gbps"], ".1f"), f(r["frac_of_copy"], ".2f"),
            f(r["torch_ms"], ".3f"), f(r["ratio_vs_torch"], ".2f"), f(r["numpy_ms"], ".1f"),
            f(r["ratio_vs_numpy"], ".1f")]))
    return "\n".join("| " + ln + " |" for ln in lines)


def svg_plot(report: dict) -> str:
    """Achieved GB/s per optimizer and param set as bars, with the copy bandwidth as a line (no dependencies)."""
    rows = report["rows"]
    w, h, left, bottom, top = 60 + 28 * max(1, len(rows)), 360, 60, 110, 30
    ymax = max([report["copy_gbps"]] + [r["gbps"] for r in rows]) * 1.1
    y = lambda v: top + (h - top - bottom) * (1 - v / ymax)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 20}" height="{h}" font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="16" font-size="12">{report["adapter"]}: achieved bandwidth per optimizer step</text>',
           f'<line x1="{left}" y1="{y(0)}" x2="{w}" y2="{y(0)}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="black"/>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<text x="{left - 4}" y="{y(v) + 3}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="12" y="{(top + y(0)) / 2}" transform="rotate(-90 12 {(top + y(0)) / 2})">GB/s</text>')
    for i, r in enumerate(rows):
        x = left + 10 + 28 * i
        out.append(f'<rect x="{x}" y="{y(r["gbps"])}" width="20" height="{y(0) - y(r["gbps"])}" fill="#4878a8">'
                   f'<title>{r["optimizer"]} {r["param_set"]}: {r["gbps"]:.1f} GB/s</title></rect>')
        out.append(f'<text x="{x + 10}" y="{y(0) + 8}" transform="rotate(60 {x + 10} {y(0) + 8})">'
                   f'{r["optimizer"]} {r["param_set"]}</text>')
    cy = y(report["copy_gbps"])
    out.append(f'<line x1="{left}" y1="{cy}" x2="{w}" y2="{cy}" stroke="#c03030" stroke-dasharray="5,3"/>')
    out.append(f'<text x="{w}" y="{cy - 4}" text-anchor="end" fill="#c03030">copy {report["copy_gbps"]:.0f} GB/s</text>')
    out.append("</svg>")
    return "\n".join(out)


def _positive(kind, minimum):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not (v >= minimum) or (kind is float and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"expected a value >= {minimum}, got {text!r}")
        return v
    return parse


def _writable(path: str) -> str:
    """An output path that can be written (checked before any measurement, so a run never loses its results)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is a folder, expected a file name")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: no folder {folder!r}")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: permission denied")
    return path


def parse_args(argv=None):
    """The command line, every argument checked before any work (argparse errors exit with status 2)."""
    ap = argparse.ArgumentParser(prog="rlx-gpu bench", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS), help=f"comma list of {', '.join(OPTIMIZERS)}")
    ap.add_argument("--sets", default=DEFAULT_SETS,
                    help="comma list of param sets: single:N (one tensor of N elements), gpt2-124m (148 tensors), "
                         "gpt2-1.5b (580 tensors)")
    ap.add_argument("--json", metavar="FILE", type=_writable, help="write every figure to FILE")
    ap.add_argument("--plot", metavar="FILE.svg", type=_writable,
                    help="write a bar chart of GB/s against the copy line")
    ap.add_argument("--device", default=None, help="adapter selector (default: RLX_GPU_ADAPTER or the best)")
    ap.add_argument("--repeats", type=_positive(int, 1), default=5, help="timed repeats per figure (the median)")
    ap.add_argument("--copy-mb", type=_positive(int, 1), default=512, help="size of the copy-bandwidth buffers, MiB")
    ap.add_argument("--memory-gb", type=_positive(float, 1e-3), default=None,
                    help="device memory budget; sets above it are scaled down (default: a quarter of RAM on CPU "
                         "adapters, 64 GB otherwise)")
    ap.add_argument("--numpy-max", type=_positive(int, 0), default=150_000_000,
                    help="largest set (elements) the NumPy twin is timed on")
    ap.add_argument("--no-torch", action="store_true", help="skip torch's figures even where torch with CUDA is here")
    ap.add_argument("--no-numpy", action="store_true", help="skip the NumPy twin's figures")
    ap.add_argument("--no-host", action="store_true", help="skip the host-path figures")
    ap.add_argument("--no-latency", action="store_true", help="skip the first-step latency probe")
    ap.add_argument("--tune", type=_positive(int, 0), default=0, metavar="N",
                    help="also time AdamW on N elements for several workgroup shapes (0: off)")
    ap.add_argument("--quiet", action="store_true", help="print only the final table")
    args = ap.parse_args(argv)
    for o in (x.strip().lower() for x in args.optimizers.split(",")):
        if o and o not in OPTIMIZERS:
            ap.error(f"unknown optimizer {o!r}; choose from {', '.join(OPTIMIZERS)}")
    sets = [x.strip() for x in args.sets.split(",") if x.strip()]
    if not sets:
        ap.error("--sets names no param set")
    for spec in sets:
        try:
            param_set(spec)
        except ValueError as e:
            ap.error(str(e).removeprefix("bench: "))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        get_device(args.device)
    except NoAdapterError as e:
        print(f"rlx-gpu bench: {e}", file=sys.stderr)
        return 2
    report = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        with open(args.plot, "w") as f:
            f.write(svg_plot(report))
    print(table(report))
    print(f"copy bandwidth {report['copy_gbps']:.1f} GB/s ({report['adapter']}, timing: {report['timing']})")
    lat = report.get("first_step_latency")
    if lat and "total_s" in lat:
        print("first-step latency: " + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in lat.items()))
    return 0
