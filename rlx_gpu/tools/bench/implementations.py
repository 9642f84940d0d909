"""``rlx-gpu bench --implementation wgpu-native|dawn|both``: which WebGPU implementation measures.

One implementation is chosen for the process (and, through ``RLX_GPU_IMPLEMENTATION``, for the bench's own child
processes: the first-step latency probe). ``both`` runs the same command once per implementation, each in a child
process (a process runs on one), and merges their reports: the rows of each in turn (every row and host row
names its ``implementation``), each one's run metadata under ``implementations``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from ...runtime import implementation as impl

CHOICES = (*impl.NAMES, "both")


def choose(name: str | None) -> None:
    """Run this process (and the children it starts) on ``name``; None keeps ``RLX_GPU_IMPLEMENTATION`` or the
    default."""
    if name:
        os.environ[impl.ENV] = name
        impl.set_implementation(name)


def run_each(argv: list) -> tuple:
    """(the merged report, {implementation: why it failed}) of ``rlx-gpu bench <argv>`` run once per
    implementation in a child process (its progress on our stderr)."""
    reports, failed = {}, {}
    with tempfile.TemporaryDirectory(prefix="rlx-gpu-bench-") as tmp:
        for name in impl.NAMES:
            out = os.path.join(tmp, f"{name}.json")
            cmd = [sys.executable, "-m", "rlx_gpu", "bench", *argv, "--implementation", name, "--json", out,
                   "--plot", os.path.join(tmp, f"{name}.svg")]
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=None, env=dict(os.environ, **{impl.ENV: name}))
            if r.returncode or not os.path.exists(out):
                failed[name] = f"rlx-gpu bench --implementation {name} failed (exit status {r.returncode})"
                continue
            with open(out) as f:
                reports[name] = json.load(f)
    return merge(reports), failed


def merge(reports: dict) -> dict:
    """One report from several implementations' (rows concatenated; the first one's metadata at the top, for
    the table's copy line; every one's under ``implementations``)."""
    if not reports:
        return {}
    first = next(iter(reports.values()))
    out = {k: v for k, v in first.items() if k not in ("rows", "host_rows")}
    out["implementation"] = "both"
    out["implementations"] = {n: {k: v for k, v in r.items() if k not in ("rows", "host_rows")}
                              for n, r in reports.items()}
    out["rows"] = [row for r in reports.values() for row in r["rows"]]
    out["host_rows"] = [row for r in reports.values() for row in r.get("host_rows", [])]
    return out
