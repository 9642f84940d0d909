"""The bench run: every optimizer x precision x param set, against the copy rate, torch and the NumPy twin."""
from __future__ import annotations

import datetime
import os
import platform
import sys

import numpy as np

from ...core.lowp import DTYPES
from ...runtime import implementation
from ...runtime.device import get_device
from .baselines import (first_step_latency, host_path, host_rows, numpy_ms, torch_copy_figures, torch_cuda,
                        torch_step_ms)
from .shapes import EXTRA_BASELINES, OPTIMIZERS, PRECISIONS, min_bytes, param_set, scale_shapes
from .timing import Timer, copy_bandwidth


def default_budget(dev) -> float:
    """Bytes of device memory the bench may use (CPU adapters share host RAM)."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 16 << 30
    return 0.25 * ram if dev.info["type"] == "CPU" else 64e9


def _optimizer(rlx_gpu, cls_name, kw, precision, shapes, dev):
    pd, gd, sd, master = PRECISIONS[precision]
    params = {n: np.full(s, 0.01, np.float32).astype(DTYPES[pd].np) for n, s in shapes}
    opts = dict(kw, state_dtype=sd, master_weights=master, grad_dtype=None if gd == pd else gd)
    opt = getattr(rlx_gpu, cls_name)(params, lr=1e-3, **opts, device=dev)
    for n, s in shapes:
        opt.grads[n].write(np.full(s, 1e-3, np.float32).astype(DTYPES[gd].np))
    return params, opts, opt


def run(args) -> dict:
    import rlx_gpu
    dev = get_device(args.device)
    timer = Timer(dev)
    from tqdm import tqdm
    say = (lambda *a: tqdm.write(" ".join(map(str, a)), file=sys.stderr)) if not args.quiet else (lambda *a: None)
    say(f"bench: {dev.name} ({dev.info['backend']}, {dev.info['type']}), timing by "
        f"{'GPU timestamp queries' if timer.gpu else 'wall clock'}")
    torch = None if args.no_torch else torch_cuda()
    copies = copy_bandwidth(dev, timer, args.copy_mb << 20, args.repeats)
    copy_gbps = max(copies.values())
    say("copy bandwidth: " + ", ".join(f"{k} {v:.1f} GB/s" for k, v in copies.items()))
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "adapter": dev.name, "backend": dev.info["backend"], "adapter_type": dev.info["type"],
        "driver": dev.info["driver"], "timing": "gpu-timestamps" if timer.gpu else "wall-clock",
        "native_f16": dev.native_f16, "implementation": dev.implementation,
        "versions": {"rlx_gpu": rlx_gpu.__version__, "python": platform.python_version(), "numpy": np.__version__,
                     **implementation.versions(), "torch": getattr(torch, "__version__", None)},
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
    names = [o.strip().lower() for o in args.optimizers.split(",") if o.strip()]
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    rows, total = [], len(names) * len(sets) * len(precisions)
    bar_off = args.quiet or not sys.stderr.isatty()  # (a log gets the lines below, not a redrawn bar)
    with tqdm(total=total, unit="row", file=sys.stderr, disable=bar_off, dynamic_ncols=True, leave=False) as bar:
        for sname in sets:
            base = param_set(sname)
            for precision in precisions:
                for oname in names:
                    bar.set_description(f"{oname} {precision} {sname}")
                    rows.append(_row(rlx_gpu, dev, timer, torch, args, oname, precision, sname, base, budget,
                                     copy_gbps, say, f"[{len(rows) + 1}/{total}]"))
                    bar.update(1)
    out = dict(meta, rows=rows)
    if args.host_rows:
        out["host_rows"] = [dict(h, implementation=dev.implementation) for h in host_rows(dev, torch, args.repeats)]
        for h in out["host_rows"]:
            say(f"{h['what']}: {h['wall_ms_per_step']:.3f} ms wall per step"
                + (f", torch fused {h['torch_wall_ms']:.3f} ms ({h['ratio_vs_torch']:.2f}x)" if "torch_wall_ms" in h
                   else ""))
    return out


def _row(rlx_gpu, dev, timer, torch, args, oname, precision, sname, base, budget, copy_gbps, say, count) -> dict:
    cls_name, kw, _, torch_spec = OPTIMIZERS[oname]
    kw = dict(kw)
    scaler = rlx_gpu.GradScaler() if kw.pop("scaler", False) else None
    numel0 = sum(int(np.prod(s)) for _, s in base)
    need = min_bytes(oname, precision, base) * 1.1  # (the arenas hold about what a step moves)
    scale = min(1.0, budget / need)
    shapes = base if scale >= 1.0 else scale_shapes(base, scale)
    numel = sum(int(np.prod(s)) for _, s in shapes)
    say(f"{count} {oname} {precision} on {sname}: {len(shapes)} tensors, {numel:,} params"
        + (f" (scaled to {scale:.3g} of {numel0:,}: the adapter's memory budget is {budget / 1e9:.1f} GB)"
           if scale < 1 else ""))
    params, opts, opt = _optimizer(rlx_gpu, cls_name, kw, precision, shapes, dev)
    step = opt.step
    if scaler is not None:
        def step(opt=opt):
            scaler.step(opt)
            scaler.update()
    for _ in range(3):
        step()
    t, wall = timer.calibrated(step, args.repeats, probe=2)
    moved = min_bytes(oname, precision, shapes)
    row = {"optimizer": oname, "dtype": precision, "param_set": sname, "numel": numel, "tensors": len(shapes),
           "scaled": None if scale >= 1 else scale, "ms_per_step": t * 1e3, "wall_ms_per_step": wall * 1e3,
           "bytes_per_step": moved, "gbps": moved / t / 1e9, "copy_gbps": copy_gbps,
           "frac_of_copy": moved / t / 1e9 / copy_gbps, "torch_ms": None, "torch_impl": None,
           "ratio_vs_torch": None, "numpy_ms": None, "ratio_vs_numpy": None, "adapter": dev.name,
           "implementation": dev.implementation}
    row["state_bytes_per_param"] = opt.memory()["state_per_param"]
    if oname == "adamw" and precision == "fp32" and not args.no_host:
        row.update(host_path(dev, opt, shapes))
    del opt
    pd, _, _, master = PRECISIONS[precision]
    if torch is not None and torch_spec is not None and not master:
        try:
            row["torch_ms"] = torch_step_ms(torch, shapes, torch_spec, args.repeats, pd)
        except (NotImplementedError, RuntimeError) as e:  # e.g. GradScaler cannot unscale bfloat16 grads
            row["torch_error"] = str(e).splitlines()[0][:200]
    if row["torch_ms"] is not None:
        row["torch_impl"] = (("clip_grad_norm_(foreach=True) + " if "clip" in torch_spec[1] else "")
                             + ("GradScaler + " if "scaler" in torch_spec[1] else "")
                             + f"{torch_spec[0]}({', '.join(f'{k}={v}' for k, v in torch_spec[1].items() if k not in ('clip', 'scaler'))}"
                             + f"{', ' + pd if pd != 'float32' else ''})")
        row["ratio_vs_torch"] = row["torch_ms"] / row["ms_per_step"]
    for spec in EXTRA_BASELINES.get(oname, ()) if torch is not None and not master else ():
        try:
            ms = torch_step_ms(torch, shapes, spec, args.repeats, pd)
            row.setdefault("other_baselines", []).append({"impl": spec[0], "ms": ms, "ratio": ms / row["ms_per_step"]})
            say(f"      {spec[0]}: {ms:.3f} ms ({ms / row['ms_per_step']:.2f}x)")
        except (ImportError, NotImplementedError, RuntimeError) as e:  # (not installed, or no kernel for it)
            row.setdefault("other_baselines", []).append({"impl": spec[0], "error": str(e).splitlines()[0][:200]})
    if not args.no_numpy and numel <= args.numpy_max:
        row["numpy_ms"] = numpy_ms(getattr(rlx_gpu.reference, cls_name), params, opts, shapes, args.repeats)
        row["ratio_vs_numpy"] = row["numpy_ms"] / row["ms_per_step"]
    say(f"      {row['ms_per_step']:.3f} ms/step, {row['gbps']:.1f} GB/s = {row['frac_of_copy']:.2f} of copy"
        + (f", torch {row['torch_ms']:.3f} ms ({row['ratio_vs_torch']:.2f}x)" if row["torch_ms"] else "")
        + (f", numpy {row['numpy_ms']:.1f} ms ({row['ratio_vs_numpy']:.1f}x)" if row["numpy_ms"] else ""))
    return row


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
        t, _ = timer.calibrated(opt.step, args.repeats, probe=2)
        out.append({"wg": wg, "ept": ept, "ms_per_step": t * 1e3, "gbps": 28 * n / t / 1e9})
        say(f"tune adamw wg {wg} ept {ept}: {t * 1e3:.3f} ms, {28 * n / t / 1e9:.1f} GB/s")
        del opt
    return out
