"""Adapters: what WebGPU finds, ranked best first, and the selector that picks one.

A selector is ``None`` (the ``RLX_GPU_ADAPTER`` environment variable, else the best adapter), a backend name
(``"vulkan"``, ``"metal"``, ``"dx12"``, ``"gl"``), ``"cpu"`` for a CPU adapter, ``"gpu"`` for any hardware
adapter, or a case-insensitive substring of the adapter's name; any of them followed by ``:<index>`` picks the
index-th of the adapters it matches, best first (``"vulkan:1"``: the second Vulkan adapter; identical GPUs have
identical names, so one process per GPU selects by index, e.g. its local rank).
"""
from __future__ import annotations

import re

from . import implementation

__all__ = ["NoAdapterError", "adapters"]

_INSTALL_HINT = (
    "rlx_gpu needs a WebGPU adapter (Vulkan, Metal or DX12). On a machine without a GPU, install a "
    "CPU Vulkan driver: on Debian/Ubuntu `apt-get install -y libvulkan1 mesa-vulkan-drivers` "
    "(llvmpipe); on Fedora `dnf install mesa-vulkan-drivers`."
)

_BACKENDS = {"vulkan": "Vulkan", "metal": "Metal", "dx12": "D3D12", "d3d12": "D3D12", "gl": "OpenGL",
             "opengl": "OpenGL", "gles": "OpenGL"}
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}


class NoAdapterError(RuntimeError):
    """Raised when no WebGPU adapter matches the selector (the message lists those present and the selectors that
    work), or none exists at all (the message says how to install a CPU Vulkan driver)."""


def runtime_dir() -> str | None:
    """Give the process a private ``XDG_RUNTIME_DIR`` when it has none (unset, empty, or not a directory): the
    Vulkan loader's window-system layers print "XDG_RUNTIME_DIR is invalid or not set" four times otherwise. A
    valid one is never changed. The directory: ``<tmp>/rlx-gpu-runtime-<uid>``, mode 0700 (a fresh ``mkdtemp``
    one if that path exists but is not ours). Returns the directory set, or None."""
    import os
    import tempfile
    cur = os.environ.get("XDG_RUNTIME_DIR", "")
    if cur and os.path.isdir(cur):
        return None
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = os.path.join(tempfile.gettempdir(), f"rlx-gpu-runtime-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        ok = os.path.isdir(path) and not os.path.islink(path) and st.st_uid == uid and (st.st_mode & 0o077) == 0
    except OSError:
        ok = False
    if not ok:
        path = tempfile.mkdtemp(prefix="rlx-gpu-runtime-")
    os.environ["XDG_RUNTIME_DIR"] = path
    return path


def _wgpu():
    """The wgpu-py API module of the implementation in use (``rlx_gpu.runtime.implementation``)."""
    runtime_dir()
    try:
        return implementation.wgpu()
    except ImportError as e:  # (wgpu is a dependency; wgpudawn an extra)
        raise NoAdapterError(str(e)) from e


def _enumerate():
    try:
        return list(_wgpu().gpu.enumerate_adapters_sync())
    except Exception as e:  # the native library found no Vulkan/Metal/DX12 loader at all
        raise NoAdapterError(f"no WebGPU adapter could be enumerated ({e}). {_INSTALL_HINT}") from e


def _describe(a) -> dict:
    info = a.info
    return {
        "name": info.get("device", ""),
        "vendor": info.get("vendor", ""),
        "backend": info.get("backend_type", ""),
        "type": info.get("adapter_type", ""),
        "driver": info.get("description", ""),
    }


def adapters() -> list[dict]:
    """List the WebGPU adapters present, best first, as dicts (name, vendor, backend, type, driver)."""
    return [_describe(a) for a in _ranked(_enumerate())]


def _ranked(found):
    def key(a):
        d = _describe(a)
        return (_TYPE_RANK.get(d["type"], 3), _BACKEND_RANK.get(d["backend"], 1))
    return sorted(found, key=key)


def _select(selector: str | None, found=None):
    return _select_at(selector, found)[0]


def _select_at(selector: str | None, found=None):
    """(the adapter ``selector`` picks, its position among the adapters found, best first)."""
    found = _ranked(_enumerate()) if found is None else found
    if not found:
        raise NoAdapterError(f"no WebGPU adapter found. {_INSTALL_HINT}")
    if not selector:
        return found[0], 0
    s = selector.strip().lower()
    index = 0
    m = re.fullmatch(r"(.*):([0-9]+)", s)
    if m and not any(s in _describe(a)["name"].lower() for a in found):  # (a name may itself end in ":<digits>")
        s, index = m.group(1), int(m.group(2))
    if s in ("cpu",):
        cands = [a for a in found if _describe(a)["type"] == "CPU"]
    elif s in ("gpu",):
        cands = [a for a in found if _describe(a)["type"] != "CPU"]
    elif s in _BACKENDS:
        cands = [a for a in found if _describe(a)["backend"] == _BACKENDS[s]]
    else:
        cands = [a for a in found if s in _describe(a)["name"].lower()]
    if s in ("", "any"):
        cands = list(found)
    if len(cands) <= index:
        have = "; ".join(f"{d['name']} ({d['backend']}, {d['type']})" for d in map(_describe, found))
        which = f"no adapter matches {selector!r}" if not cands else \
            f"{selector!r} asks for adapter {index} of the {len(cands)} that match"
        raise NoAdapterError(
            f"{which} (from the device argument or RLX_GPU_ADAPTER). Adapters present: {have}. Use a backend "
            "(vulkan, metal, dx12, gl), 'cpu', 'gpu' or part of a name, optionally with ':<index>'."
        )
    return cands[index], found.index(cands[index])
