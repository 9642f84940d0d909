"""Soak: a long training loop with everything around the step on, and optimizers made and dropped in a loop,
watched for memory growth and for a step that slows down over time.

Loop: AdamW with ``clip_grad_norm=``, a GradScaler read back every step as a loop with a host loss does (an inf
planted every ``--inf-every`` steps, so the scaler skips and backs off), warm-up + cosine LR, a checkpoint written (and, every other time, restored) every
``--checkpoint-every`` steps. Then ``--optimizers`` optimizers are created, stepped once and dropped.

Criteria (docs/guides/reliability.md, Soak): resident memory grows by at most ``--max-rss-mb`` over the loop
between the two timed windows and over the optimizer churn after its first tenth; the median step time of the last
``--window`` steps is within ``--max-slowdown`` of the first ``--window`` after warm-up, each against a control: in
both windows every step is followed by a step of an optimizer of the same configuration made at the start and
stepped in these windows only (after its own warm-up; its own GradScaler; no schedule, infs or checkpoints), and the
slowdown is that of the soaked optimizer's median over the control's (a shared machine's speed wanders by 20-80%
from one window to the next; ``control_drift`` and the unjudged ``raw_slowdown`` are reported). Exit status 0 when
every criterion holds.

    python benchmarks/soak.py                           # the full run: 10,000 steps, 200 optimizers
    python benchmarks/soak.py --steps 1500 --checkpoint-every 300 --optimizers 40 --window 300   # CI's reduced run
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe
from rlx_gpu.schedules import warmup_cosine


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def model(rng, tensors: int, width: int) -> dict:
    return {f"layer{i}.{k}": (rng.standard_normal(s) * 0.05).astype(np.float32)
            for i in range(tensors // 2) for k, s in (("weight", (width, width)), ("bias", (width,)))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__),
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--checkpoint-every", type=int, default=1_000)
    ap.add_argument("--inf-every", type=int, default=97, help="plant an inf in the grads every N steps")
    ap.add_argument("--warmup", type=int, default=200, help="steps before the first measurement")
    ap.add_argument("--window", type=int, default=1_000, help="steps in each timed window")
    ap.add_argument("--optimizers", type=int, default=200, help="optimizers created, stepped and dropped")
    ap.add_argument("--tensors", type=int, default=20)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--max-rss-mb", type=float, default=16.0)
    ap.add_argument("--max-slowdown", type=float, default=0.10)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args(argv)
    if args.steps < args.warmup + 2 * args.window:
        ap.error("--steps must cover the warm-up and two timed windows")
    rng = np.random.default_rng(0)
    params = model(rng, args.tensors, args.width)
    pool = [{n: (rng.standard_normal(p.shape) * 1e-2).astype(np.float32) for n, p in params.items()}
            for _ in range(8)]
    opt = rlx_gpu.AdamW(params, lr=1e-3, clip_grad_norm=1.0, device=args.device)
    sched = warmup_cosine(opt, warmup_steps=args.steps // 20, total_steps=args.steps)
    scaler = rlx_gpu.GradScaler(init_scale=2.0 ** 10, growth_interval=50)  # one growth and one back-off per --inf-every=97 steps: the scale stays put
    folder = tempfile.mkdtemp(prefix="rlx-gpu-soak-")
    path = os.path.join(folder, "ckpt.npz")
    times, rss, ctrl_times = [], {}, {"first": [], "last": []}
    ctrl = rlx_gpu.AdamW(params, lr=1e-3, clip_grad_norm=1.0, device=args.device)  # (stepped in the windows only)
    ctrl_scaler = rlx_gpu.GradScaler(init_scale=2.0 ** 10, growth_interval=50)

    def control_step(s):
        scale = np.float32(ctrl_scaler.get_scale())
        ctrl_scaler.step(ctrl, {n: v * scale for n, v in pool[s % len(pool)].items()})
        ctrl_scaler.update()
    for s in range(args.warmup):  # (its warm-up, as the soaked optimizer's: caches and tables grown before)
        control_step(s)
    print(f"soak: {opt.device.name}, {sum(p.size for p in params.values()):,} params in {len(params)} tensors, "
          f"{args.steps} steps", file=sys.stderr)
    for s in range(args.steps):
        window = "first" if args.warmup <= s < args.warmup + args.window else \
            "last" if s >= args.steps - args.window else None
        t0 = time.perf_counter()
        scale = np.float32(scaler.get_scale())  # a loop with a host loss reads the scale back every step
        g = {n: v * scale for n, v in pool[s % len(pool)].items()}
        if s % args.inf_every == args.inf_every - 1:
            g[next(iter(g))][0, 0] = np.inf
        scaler.step(opt, g)
        scaler.update()
        sched.step()
        times.append(time.perf_counter() - t0)
        if window:  # the control's step, right after: the same work on the same machine state, without the history
            t0 = time.perf_counter()
            control_step(s)
            ctrl_times[window].append(time.perf_counter() - t0)
        if (s + 1) % args.checkpoint_every == 0:
            opt.save(path)
            if (s + 1) // args.checkpoint_every % 2 == 0:
                opt.restore(path)
        if s + 1 == args.warmup + args.window:  # (memory between the timed windows: no control step in between)
            rss["loop_start"] = rss_mb()
        if s + 1 == args.steps - args.window:
            rss["loop_end"] = rss_mb()
    opt.read_params()
    first = statistics.median(times[args.warmup:args.warmup + args.window])
    last = statistics.median(times[-args.window:])
    assert np.isfinite(opt.read_params()[next(iter(params))]).all()
    ctrl_first, ctrl_last = (statistics.median(ctrl_times[k]) for k in ("first", "last"))
    del opt, sched
    ctrl = ctrl_scaler = None  # (the control dropped before the churn too)
    churn = []
    small = model(rng, 4, 64)
    for i in range(args.optimizers):
        o = rlx_gpu.AdamW(small, clip_grad_norm=1.0, skip_nonfinite=True, device=args.device)
        o.step({n: np.ones_like(p) for n, p in small.items()})
        o.read_params()
        del o
        if i + 1 == max(1, args.optimizers // 10):
            rss["churn_start"] = rss_mb()
        churn.append(rss_mb())
    rss["churn_end"] = rss_mb()
    out = {
        "adapter": rlx_gpu.get_device(args.device).name, "steps": args.steps, "optimizers": args.optimizers,
        "rss_mb": rss, "loop_rss_growth_mb": rss["loop_end"] - rss["loop_start"],
        "churn_rss_growth_mb": rss["churn_end"] - rss["churn_start"],
        "first_window_median_ms": first * 1e3, "last_window_median_ms": last * 1e3,
        "control_first_median_ms": ctrl_first * 1e3, "control_last_median_ms": ctrl_last * 1e3,
        "slowdown": (last / ctrl_last) / (first / ctrl_first) - 1.0, "raw_slowdown": last / first - 1.0,
        "control_drift": ctrl_last / ctrl_first - 1.0,
        "window_medians_ms": [statistics.median(times[i:i + args.window]) * 1e3
                              for i in range(args.warmup, len(times) - args.window + 1, args.window)], "scale": scaler.get_scale(), "limits": {
            "max_rss_mb": args.max_rss_mb, "max_slowdown": args.max_slowdown},
    }
    out["ok"] = bool(out["loop_rss_growth_mb"] <= args.max_rss_mb and out["churn_rss_growth_mb"] <= args.max_rss_mb
                     and out["slowdown"] <= args.max_slowdown)
    text = json.dumps(out, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    print(text)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
