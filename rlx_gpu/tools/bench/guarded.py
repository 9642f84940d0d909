"""Bench figures that survive one variant failing (a shader that does not compile on one adapter, a path the device
lacks): the failure is one printed line and a missing figure, the other variants go on; rounds stop at a deadline
so a slow variant shortens the run instead of losing it. Used by benchmarks/precond_bench.py and stiefel_bench.py.
"""
from __future__ import annotations

import math
import time

from .timing import median


def attempt(errors: dict, key: str, fn):
    """``fn()``, or None where it raised: the error printed as ``key error: ...`` and kept in ``errors[key]``."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (one variant's failure is its figure's absence, not the run's end)
        msg = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:300]}"
        errors[key] = msg
        print(f"{key} error: {msg}", flush=True)
        return None


def loud(errors: dict, key: str, f):
    """A figure function that prints ``key <ms> ms`` as it comes; NaN (and not run again) once it has raised."""
    def run():
        v = None if key in errors else attempt(errors, key, f)
        if v is None:
            return math.nan
        print(key, round(v, 3), "ms", flush=True)
        return v
    return run


def rounds_until(figures: dict, rounds: int, budget_s: float | None) -> tuple[dict, dict]:
    """Like timing.alternating (each figure once per round, in turn), stopping before a round that would end past
    ``budget_s`` seconds from now (judged by the longest round so far; at least one round): (median per name
    without the NaNs of failed ones, every measurement per name)."""
    t0, longest = time.monotonic(), 0.0
    got = {k: [] for k in figures}
    for r in range(rounds):
        if r and budget_s is not None and time.monotonic() - t0 + longest > budget_s:
            print(f"stopping after {r} round(s): the budget of {budget_s:g} s", flush=True)
            break
        start = time.monotonic()
        for k, f in figures.items():
            got[k].append(f())
        longest = max(longest, time.monotonic() - start)
    med = {k: median(ok) for k, v in got.items() if (ok := [x for x in v if not math.isnan(x)])}
    return med, got


def first_step_ms(errors: dict, key: str, step, sync) -> float | None:
    """Wall milliseconds of one ``step()`` through ``sync()`` (a first step: pipelines compiled, factors made),
    printed; None where it raised."""
    def run():
        t0 = time.perf_counter()
        step()
        sync()
        return (time.perf_counter() - t0) * 1e3
    v = attempt(errors, key, run)
    if v is not None:
        print(key, round(v, 1), "ms", flush=True)
    return v


def variant(out: dict, label: str, make, sync, figure) -> None:
    """One variant of a bench: ``make()`` (its optimizer, grads written), its first step timed, then
    ``figure(opt)`` as ``out["figures"][label + "_ms"]``; its GEMM path (``matmul_path``, ours only) in
    ``out["paths"]``.
    A failure in either is an error line (:func:`attempt`) and no figure."""
    opt = attempt(out["errors"], f"{label}_ms", make)
    if opt is None:
        return
    ms = first_step_ms(out["errors"], f"{label}_first_step_ms", opt.step, sync)
    if hasattr(opt, "matmul_path"):
        out["paths"][label] = opt.matmul_path
    if ms is not None:
        out["first_step"][f"{label}_first_step_ms"] = ms
        out["figures"][f"{label}_ms"] = lambda: figure(opt)


def with_grads(opt, grads: dict):
    """``opt`` with ``grads`` (name -> array) written into its gradient buffers, which its steps read."""
    for k, g in grads.items():
        opt.grads[k].write(g)
    return opt
