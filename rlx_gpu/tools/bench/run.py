"""The bench run: every optimizer x precision x param set, against the copy rate, torch and the NumPy twin."""
from __future__ import annotations

import datetime
import platform
import sys
import time

import numpy as np

from ...runtime import implementation
from ...runtime.device import get_device
from .baselines import (first_step_latency, host_path, host_rows, numpy_ms, torch_copy_figures, torch_cuda,
                        torch_step_ms)
from .progress import Progress
from .rows import WINDOW, Plan, build, plan
from .shapes import EXTRA_BASELINES, OPTIMIZERS, PRECISIONS, min_bytes
from .timing import Timer, copy_bandwidth


def lists(args) -> tuple:
    """(optimizers, precisions, sets) named by the command line, in order."""
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    return [o.lower() for o in split(args.optimizers)], split(args.precisions), split(args.sets)


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
    if args.tune:
        meta["tune"] = tune(dev, timer, args, say)
    plans = plan(*lists(args), args.memory_gb * 1e9, args.matrix_div, args.matrix_layers)
    todo = [p for p in plans if not p.skip]
    for p in plans:
        if p.skip:
            say(p.describe())
    rows = []
    with Progress(todo, quiet=args.quiet) as progress:
        for p in todo:
            rows.append(_row(rlx_gpu, dev, timer, torch, args, p, copy_gbps, say))
            say(progress.done(p, _summary(rows[-1])))
    out = dict(meta, rows=rows, skipped=[{"optimizer": p.optimizer, "dtype": p.precision, "param_set": p.param_set,
                                          "reason": p.skip} for p in plans if p.skip])
    if args.host_rows:
        out["host_rows"] = [dict(h, implementation=dev.implementation) for h in host_rows(dev, torch, args.repeats)]
        for h in out["host_rows"]:
            say(f"{h['what']}: {h['wall_ms_per_step']:.3f} ms wall per step"
                + (f", torch fused {h['torch_wall_ms']:.3f} ms ({h['ratio_vs_torch']:.2f}x)" if "torch_wall_ms" in h
                   else ""))
    return out


def _row(rlx_gpu, dev, timer, torch, args, p: Plan, copy_gbps, say) -> dict:
    params, opts, opt, step, grads = build(rlx_gpu, p, dev)
    t0 = time.perf_counter()
    for _ in range(3):  # warm-up: 3 steps, or 1-2 where they take a second
        step()
        dev.sync()
        if time.perf_counter() - t0 > 1.0:
            break
    if p.optimizer in WINDOW:  # (every window holds the same number of refreshes)
        step()
        t, wall = timer.measure(step, WINDOW[p.optimizer], args.repeats)
    else:
        t, wall = timer.calibrated(step, args.repeats, probe=2)
    moved = min_bytes(p.optimizer, p.precision, p.shapes)
    gbps = None if moved is None else moved / t / 1e9
    row = {"optimizer": p.optimizer, "dtype": p.precision, "param_set": p.param_set, "numel": p.numel,
           "tensors": len(p.shapes), "scaled": p.scale, "ms_per_step": t * 1e3, "wall_ms_per_step": wall * 1e3,
           "bytes_per_step": moved, "gbps": gbps, "copy_gbps": copy_gbps,
           "frac_of_copy": None if gbps is None else gbps / copy_gbps, "torch_ms": None, "torch_impl": None,
           "ratio_vs_torch": None, "numpy_ms": None, "ratio_vs_numpy": None, "adapter": dev.name,
           "implementation": dev.implementation}
    row["state_bytes_per_param"] = opt.memory()["state_per_param"]
    if p.optimizer == "adamw" and p.precision == "fp32" and not args.no_host:
        row.update(host_path(dev, opt, p.shapes))
    del opt
    _baselines(row, torch, args, p, say)
    # (Partition's twin is its parts' twins: its NumPy time is theirs, not timed here)
    twin = None if p.optimizer == "partition" else getattr(rlx_gpu.reference, OPTIMIZERS[p.optimizer][0], None)
    if twin is not None and not args.no_numpy and p.numel <= args.numpy_max:
        row["numpy_ms"] = numpy_ms(twin, params, opts, grads, args.repeats)
        row["ratio_vs_numpy"] = row["numpy_ms"] / row["ms_per_step"]
    return row


def _baselines(row, torch, args, p: Plan, say) -> None:
    """torch's figure (and the other libraries') on the same shapes, where torch with CUDA is here."""
    _, _, _, torch_spec = OPTIMIZERS[p.optimizer]
    pd, _, _, master = PRECISIONS[p.precision]
    if torch is None or master:
        return
    if torch_spec is not None:
        try:
            row["torch_ms"] = torch_step_ms(torch, p.shapes, torch_spec, args.repeats, pd)
        except (ImportError, NotImplementedError, RuntimeError) as e:  # e.g. GradScaler cannot unscale bfloat16
            row["torch_error"] = str(e).splitlines()[0][:200]
    if row["torch_ms"] is not None:
        name, kw = torch_spec
        row["torch_impl"] = (("clip_grad_norm_(foreach=True) + " if "clip" in kw else "")
                             + ("GradScaler + " if "scaler" in kw else "")
                             + f"{name}({', '.join(f'{k}={v}' for k, v in kw.items() if k not in ('clip', 'scaler'))}"
                             + f"{', ' + pd if pd != 'float32' else ''})")
        row["ratio_vs_torch"] = row["torch_ms"] / row["ms_per_step"]
    for spec in EXTRA_BASELINES.get(p.optimizer, ()):
        try:
            ms = torch_step_ms(torch, p.shapes, spec, args.repeats, pd)
            row.setdefault("other_baselines", []).append({"impl": spec[0], "ms": ms, "ratio": ms / row["ms_per_step"]})
            say(f"      {spec[0]}: {ms:.3f} ms ({ms / row['ms_per_step']:.2f}x)")
        except (ImportError, NotImplementedError, RuntimeError) as e:  # (not installed, or no kernel for it)
            row.setdefault("other_baselines", []).append({"impl": spec[0], "error": str(e).splitlines()[0][:200]})


def _summary(row) -> str:
    """A finished row in one line: its time, its bandwidth where it has a bytes model, its comparisons."""
    return (f"{row['ms_per_step']:.3f} ms/step"
            + (f", {row['gbps']:.1f} GB/s = {row['frac_of_copy']:.2f} of copy" if row["gbps"] is not None else "")
            + (f", {row['torch_impl']} {row['torch_ms']:.3f} ms ({row['ratio_vs_torch']:.2f}x)" if row["torch_ms"]
               else "")
            + (f", numpy {row['numpy_ms']:.1f} ms ({row['ratio_vs_numpy']:.2g}x)" if row["numpy_ms"] else ""))


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
