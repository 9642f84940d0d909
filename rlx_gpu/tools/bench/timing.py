"""Timing on the device: GPU timestamp queries where the adapter has them, else a synchronised wall clock; and
the copy bandwidth every optimizer row is compared against."""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

from ...runtime.kernels import shipped_kernel

# WGSL copy-kernel variants (workgroup size, vec4s per thread) timed for the copy bandwidth.
COPY_VARIANTS = ((256, 4), (256, 1), (128, 2), (512, 4))


def median(xs):
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
        return median(gpu_t or wall_t), median(wall_t)


    def calibrated(self, fn, repeats: int, probe: int = 3) -> tuple[float, float]:
        """:meth:`measure` with as many calls per run as fill about 50 ms (from a first run of ``probe`` calls)."""
        t, _ = self.measure(fn, probe, 1)
        return self.measure(fn, steps_for(t), repeats)


def alternating(figures: dict, rounds: int) -> tuple[dict, dict]:
    """Each of ``figures`` (name -> a function returning one measurement) once per round, in turn, ``rounds``
    times (so drift hits every figure alike): (median per name, every measurement per name)."""
    got = {k: [] for k in figures}
    for _ in range(rounds):
        for k, f in figures.items():
            got[k].append(f())
    return {k: median(v) for k, v in got.items()}, got


def report(out: dict, path) -> None:
    """Print a bench script's result (without its raw ``all`` measurements) and write it whole to ``path``."""
    import json
    print(json.dumps({k: v for k, v in out.items() if k != "all"}, indent=1))
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


def steps_for(seconds_per_step: float, target: float = 0.05) -> int:
    """Calls per timed run: as many as fill ``target`` seconds, 3 to 200 (1 or 2 where fewer already fill it)."""
    return int(min(200, max(min(3, math.ceil(target / max(seconds_per_step, 1e-9))), target / max(seconds_per_step, 1e-6))))


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
    t, _ = timer.calibrated(buffer_copy, repeats)
    out["buffer_copy"] = 2 * nbytes / t / 1e9
    for wg, ept in COPY_VARIANTS:
        if wg > dev.limits["max-compute-invocations-per-workgroup"]:
            continue
        k = shipped_kernel(dev, "copy.wgsl", "copy", WG=wg, EPT=ept)
        bg = k.bind({"src": a, "dst": b})
        groups = -(-(nbytes // 16) // (wg * ept))

        def kern(k=k, bg=bg, groups=groups):
            enc = dev.device.create_command_encoder()
            k.dispatch(enc, bg, groups)
            dev.submit(enc)

        kern()
        t, _ = timer.calibrated(kern, repeats)
        out[f"wgsl_copy_wg{wg}_ept{ept}"] = 2 * nbytes / t / 1e9
    a.destroy()
    b.destroy()
    return out


