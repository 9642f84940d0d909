"""``rlx-gpu info [--json] [--device SEL]``: what this machine offers rlx_gpu.

Both WebGPU implementations (wgpu-native and Dawn: which one is in use, ``RLX_GPU_IMPLEMENTATION`` else the
default; the other is probed in a child process, as a process runs on one only), and on each every adapter
(name, backend, type, driver), the limits that matter (max storage binding, max buffer size, workgroup limits),
the features rlx_gpu uses (``shader-f16``, ``timestamp-query``, ``subgroups``, and on Dawn
``chromium-experimental-subgroup-matrix`` with its subgroup-matrix configurations); which adapter a plain
``get_device()`` would choose and why (``RLX_GPU_ADAPTER``, else the ranking: discrete GPU, integrated, virtual,
CPU; Vulkan/Metal/DX12 before GL); which shader validators are available; the versions of rlx_gpu, wgpu-py,
wgpu-native, wgpudawn, Dawn, NumPy, ml_dtypes and Python. Exit 0; 2 when no adapter could be enumerated or the
selector (``--device``, else ``RLX_GPU_ADAPTER``) matches none on the implementation in use (the report is still
printed).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys

from ..runtime import implementation as impl

LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
          "min-storage-buffer-offset-alignment", "max-compute-workgroup-size-x",
          "max-compute-invocations-per-workgroup", "max-compute-workgroups-per-dimension",
          "max-compute-workgroup-storage-size")
FEATURES = ("shader-f16", "timestamp-query", "subgroups", "chromium-experimental-subgroup-matrix")


def versions(implementations=None) -> dict:
    """rlx_gpu's version and those of its dependencies: the implementation in use's (and those of
    ``implementations``, {name: versions} as their probes found them)."""
    import ml_dtypes
    import numpy as np

    from .. import __version__
    out = {"rlx_gpu": __version__}
    out.update(impl.versions())
    for v in (implementations or {}).values():
        out.update(v or {})
    return dict(out, numpy=np.__version__, ml_dtypes=ml_dtypes.__version__, python=platform.python_version())


def validators() -> dict:
    """Which ``rlx-gpu check-shaders`` validators are available here: {name: {"available", "detail"}}."""
    from .check import naga_executable
    exe, why = naga_executable()
    tint = importlib.util.find_spec("wgpudawn") is not None
    return {"naga-cli": {"available": exe is not None, "detail": exe or why},
            "wgpu": {"available": True, "detail": "naga inside wgpu-native, on the selected adapter"},
            "tint": {"available": tint, "detail": "wgpudawn (Dawn's Tint)" if tint else
                     "wgpudawn is not installed (pip install rlx_gpu[check])"}}


def adapters_here(selector: str | None = None) -> dict:
    """The adapters of the implementation this process uses, each with its limits, features (and on Dawn its
    subgroup-matrix configurations), and which one ``selector`` (else ``RLX_GPU_ADAPTER``) picks and why."""
    from ..runtime.discovery import _describe, _enumerate, _ranked, _select
    found = _ranked(_enumerate())
    env = os.environ.get("RLX_GPU_ADAPTER")
    sel = selector if selector is not None else env
    chosen, why = None, None
    try:
        chosen = _select(sel, found)
        why = (f"--device {selector!r}" if selector is not None else f"RLX_GPU_ADAPTER={env!r}" if env else
               "the best ranked (discrete, integrated, virtual, CPU; Vulkan/Metal/DX12 before GL)")
    except Exception as e:  # a selector that matches nothing: say so, list the rest
        why = str(e)
    out = []
    for a in found:
        d = _describe(a)
        d["selected"] = a is chosen
        d["limits"] = {k: a.limits[k] for k in LIMITS if k in a.limits}
        d["features"] = sorted(f for f in FEATURES if f in impl.features(a))
        d.update(impl.properties(a))
        out.append(d)
    return {"adapters": out, "selection": why, "selected": chosen is not None, "toggles": list(impl.toggles()),
            "versions": impl.versions()}


def _child(selector) -> None:
    """(In the child process that probes the other implementation.) One JSON line: adapters_here or the error."""
    try:
        rep = adapters_here(selector)
    except Exception as e:
        rep = {"error": f"{type(e).__name__}: {e}".strip().splitlines()[0], "adapters": []}
    print(json.dumps(rep))


def probe(name: str, selector: str | None = None, timeout: float = 120.0) -> dict:
    """:func:`adapters_here` on implementation ``name``, in a child process (a crash there cannot take this one
    down); ``{"error": why, "adapters": []}`` when it is not installed or found nothing."""
    code = f"from rlx_gpu.tools.info import _child; _child({selector!r})"
    env = dict(os.environ, RLX_GPU_IMPLEMENTATION=name)
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish in {timeout:g} s", "adapters": []}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        tail = [ln for ln in r.stderr.splitlines() if ln.strip()]
        return {"error": f"the probe failed (exit status {r.returncode}): {tail[-1] if tail else 'no output'}",
                "adapters": []}
    return json.loads(lines[-1])


def report(selector: str | None = None) -> dict:
    """The whole report: the implementation in use (its adapters at the top level, as before), both
    implementations under ``implementations``, validators and versions."""
    here, using = adapters_here(selector), impl.implementation()
    impls = {}
    for name in impl.NAMES:
        rep = dict(here) if name == using else probe(name, selector)
        rep["in_use"] = name == using
        impls[name] = rep
    found = {n: r.get("versions") for n, r in impls.items() if n != using}
    return dict(here, implementation=using, implementations=impls, validators=validators(), versions=versions(found))


def _adapter_lines(d: dict) -> list:
    lim, mark = d["limits"], "*" if d.get("selected") else " "
    lines = [f" {mark} {d['name']} ({d['backend']}, {d['type']}; {d['driver']})",
             f"     max storage binding {lim.get('max-storage-buffer-binding-size', 0):,} B, max buffer "
             f"{lim.get('max-buffer-size', 0):,} B, workgroup <= {lim.get('max-compute-invocations-per-workgroup', '?')}"
             f" invocations, {lim.get('max-compute-workgroups-per-dimension', '?')} per dimension; features: "
             + (", ".join(d["features"]) or "none of " + ", ".join(FEATURES))]
    configs = d.get("subgroup_matrix_configs")
    if configs:
        lines.append("     subgroup matrices: " + ", ".join(
            f"{c['component_type']} {c['m']}x{c['n']}x{c['k']} -> {c['result_component_type']}" for c in configs))
    return lines


def text(rep: dict) -> str:
    lines = [f"rlx_gpu {rep['versions']['rlx_gpu']}: " + ", ".join(f"{k} {v}" for k, v in rep["versions"].items()
                                                                  if k != "rlx_gpu"), ""]
    using = rep["implementation"]
    env = os.environ.get(impl.ENV)
    lines.append(f"implementation in use: {using} ({f'{impl.ENV}={env}' if env else 'the default'}; "
                 f"choose with {impl.ENV}=wgpu-native|dawn or rlx_gpu.set_implementation)")
    for name, r in sorted(rep["implementations"].items(), key=lambda kv: not kv[1]["in_use"]):
        how = "in use" if r["in_use"] else "probed in a child process"
        lines += ["", f"{name} ({how}): " + (r["error"] if r.get("error") else "adapters, best first:")]
        for d in r["adapters"]:
            lines += _adapter_lines(d)
        if r.get("toggles"):
            lines.append(f"     Dawn toggles set by rlx_gpu: {', '.join(r['toggles'])}")
    lines += [f"selected (*, on {using}): {rep['selection']}", "", "shader validators (rlx-gpu check-shaders):"]
    for name, v in rep["validators"].items():
        lines.append(f"  {name:9s} {'yes' if v['available'] else 'no '}  {v['detail']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlx-gpu info", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--device", default=None,
                    help="selector to resolve instead of RLX_GPU_ADAPTER (see docs/guides/platforms.md)")
    args = ap.parse_args(argv)
    from ..runtime.discovery import NoAdapterError
    try:
        rep = report(args.device)
    except NoAdapterError as e:
        print(f"rlx-gpu info: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rep, indent=1, default=str) if args.json else text(rep))
    return 0 if rep["selected"] else 2  # a selector that matches nothing
