"""``rlx-gpu info [--json] [--device SEL]``: what this machine offers rlx_gpu.

Every WebGPU adapter (name, backend, type, driver), which one a plain ``get_device()`` would choose and why
(``RLX_GPU_ADAPTER``, else the ranking: discrete GPU, integrated, virtual, CPU; Vulkan/Metal/DX12 before GL), the
limits that matter (max storage binding, max buffer size, workgroup limits), the features rlx_gpu uses
(``shader-f16``, ``timestamp-query``, ``subgroup``), which shader validators are available, and the versions of
rlx_gpu, wgpu-py, wgpu-native, NumPy, ml_dtypes and Python. Exit 0; 2 when no adapter could be enumerated or
the selector (``--device``, else ``RLX_GPU_ADAPTER``) matches none (the report is still printed).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys

LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
          "min-storage-buffer-offset-alignment", "max-compute-workgroup-size-x",
          "max-compute-invocations-per-workgroup", "max-compute-workgroups-per-dimension",
          "max-compute-workgroup-storage-size")
FEATURES = ("shader-f16", "timestamp-query", "subgroup")


def versions() -> dict:
    import ml_dtypes
    import numpy as np
    import wgpu
    import wgpu.backends.wgpu_native as native

    from .. import __version__
    return {"rlx_gpu": __version__, "wgpu-py": wgpu.__version__, "wgpu-native": native.__version__,
            "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version()}


def validators() -> dict:
    """Which ``rlx-gpu check-shaders`` validators are available here: {name: {"available", "detail"}}."""
    from .check import naga_executable
    exe, why = naga_executable()
    tint = importlib.util.find_spec("wgpudawn") is not None
    return {"naga-cli": {"available": exe is not None, "detail": exe or why},
            "wgpu": {"available": True, "detail": "naga inside wgpu-native, on the selected adapter"},
            "tint": {"available": tint, "detail": "wgpudawn (Dawn's Tint)" if tint else
                     "wgpudawn is not installed (pip install rlx_gpu[check])"}}


def report(selector: str | None = None) -> dict:
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
        d["features"] = sorted(f for f in FEATURES if f in a.features)
        out.append(d)
    return {"adapters": out, "selection": why, "selected": chosen is not None, "validators": validators(),
            "versions": versions()}


def text(rep: dict) -> str:
    lines = [f"rlx_gpu {rep['versions']['rlx_gpu']}: " + ", ".join(f"{k} {v}" for k, v in rep["versions"].items()
                                                                  if k != "rlx_gpu"), "", "adapters (best first):"]
    for d in rep["adapters"]:
        mark = "*" if d["selected"] else " "
        lim = d["limits"]
        lines.append(f" {mark} {d['name']} ({d['backend']}, {d['type']}; {d['driver']})")
        lines.append(f"     max storage binding {lim.get('max-storage-buffer-binding-size', 0):,} B, max buffer "
                     f"{lim.get('max-buffer-size', 0):,} B, workgroup <= "
                     f"{lim.get('max-compute-invocations-per-workgroup', '?')} invocations, "
                     f"{lim.get('max-compute-workgroups-per-dimension', '?')} per dimension; features: "
                     + (", ".join(d["features"]) or "none of " + ", ".join(FEATURES)))
    lines += [f"selected (*): {rep['selection']}", "", "shader validators (rlx-gpu check-shaders):"]
    for name, v in rep["validators"].items():
        lines.append(f"  {name:9s} {'yes' if v['available'] else 'no '}  {v['detail']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="rlx-gpu info", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--device", default=None, help="selector to resolve instead of RLX_GPU_ADAPTER (see README)")
    args = ap.parse_args(argv)
    from ..runtime.discovery import NoAdapterError
    try:
        rep = report(args.device)
    except NoAdapterError as e:
        print(f"rlx-gpu info: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rep, indent=1) if args.json else text(rep))
    return 0 if rep["selected"] else 2  # a selector that matches nothing
