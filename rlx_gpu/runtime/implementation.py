"""The WebGPU implementation under rlx_gpu, one per process: wgpu-py on wgpu-native (``"wgpu-native"``, the
default) or wgpudawn on Dawn (``"dawn"``, ``pip install rlx_gpu[dawn]``). Both give the wgpu-py API; this module
is the only place in the package that imports either.

Chosen by ``RLX_GPU_IMPLEMENTATION=wgpu-native|dawn`` or :func:`set_implementation` before the first adapter is
listed or device made; afterwards choosing the other one is a RuntimeError naming the one in use. (wgpudawn's
``install_as_wgpu()`` is not used: it would turn the user's own ``import wgpu`` into Dawn too.)

Dawn gets its instance toggles before its first adapter (:data:`DAWN_TOGGLES`): ``allow_unsafe_apis`` (Dawn's
experimental features: subgroup matrices, and ``buffer-map-extended-usages``, the host-mappable storage buffers
of CPU adapters) and ``vulkan_enable_f16_on_nvidia`` (without it Dawn offers no ``shader-f16`` on NVIDIA).

Feature names differ between the two (wgpu-native's ``subgroup`` is WebGPU's and Dawn's ``subgroups``; wgpu-native's
``mappable-primary-buffers`` is Dawn's ``buffer-map-extended-usages``): :func:`features` gives one spelling, the
one rlx_gpu uses, and :func:`native_feature` the implementation's own, for requesting it.
"""
from __future__ import annotations

import importlib
import os
import threading
import time

__all__ = ["NAMES", "DEFAULT", "DAWN_TOGGLES", "LIMITS", "FEATURES", "set_implementation", "implementation", "wgpu",
           "load", "versions", "features", "native_feature", "subgroup_directive", "properties", "toggles",
           "skip_validation", "robustness",
           "request_device", "gone", "poll_without_blocking", "POLL_SLEEP"]

NAMES = ("wgpu-native", "dawn")
DEFAULT = "wgpu-native"
ENV = "RLX_GPU_IMPLEMENTATION"
_MODULES = {"wgpu-native": "wgpu", "dawn": "wgpudawn"}
_INSTALL = {"wgpu-native": "pip install wgpu", "dawn": "pip install rlx_gpu[dawn] (or pip install wgpudawn)"}
#: The instance toggles rlx_gpu gives Dawn before its first adapter (see the module docstring).
DAWN_TOGGLES = ("allow_unsafe_apis", "vulkan_enable_f16_on_nvidia")
# rlx_gpu's name of a feature -> the implementation's own (where they differ)
_SPELLING = {"wgpu-native": {"subgroups": "subgroup"},
             "dawn": {"mappable-primary-buffers": "buffer-map-extended-usages"}}

# Limits a device asks for at the adapter's own value (wgpu's defaults are far smaller).
LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
          "max-compute-workgroups-per-dimension", "max-compute-invocations-per-workgroup",
          "max-compute-workgroup-size-x", "max-compute-workgroup-storage-size",
          "min-storage-buffer-offset-alignment", "max-bind-groups")
# Features a device asks for where the adapter has them (rlx_gpu's spelling). implicit-device-synchronization is
# Dawn's (wgpu-native's devices are always thread-safe): without it a Dawn device must not be called from two
# threads at once, and several optimizers on one device may step from several threads (rlx_gpu.core.sync).
# subgroups and chromium-experimental-subgroup-matrix: the tensor-core GEMM (rlx_gpu.linalg.tc; Dawn offers the
# second with allow_unsafe_apis).
FEATURES = ("timestamp-query", "shader-f16", "implicit-device-synchronization", "subgroups",
            "chromium-experimental-subgroup-matrix")
SKIP_ENV = "RLX_GPU_DAWN_SKIP_VALIDATION"
ROBUST_ENV = "RLX_GPU_DAWN_DISABLE_ROBUSTNESS"
_state: dict = {"chosen": None, "module": None, "name": None}
_lock = threading.RLock()


def _parse(name, where: str) -> str:
    s = name.strip().lower() if isinstance(name, str) else None
    if s not in NAMES:
        raise ValueError(f"{where}: unknown WebGPU implementation {name!r}; expected one of {', '.join(NAMES)}")
    return s


def _requested() -> str:
    if _state["chosen"] is not None:
        return _state["chosen"]
    env = os.environ.get(ENV, "").strip()
    return _parse(env, f"{ENV}={env}") if env else DEFAULT


def set_implementation(name: str) -> None:
    """Run rlx_gpu on ``name`` ("wgpu-native" or "dawn") in this process. Call it before the first adapter is
    listed or device made (it overrides ``RLX_GPU_IMPLEMENTATION``); once one is in use, asking for the other is a
    RuntimeError naming it, and asking for the same one does nothing."""
    name = _parse(name, "rlx_gpu.set_implementation")
    with _lock:
        used = _state["name"]
        if used is not None and used != name:
            raise RuntimeError(f"rlx_gpu.set_implementation({name!r}): this process already runs on {used!r} "
                               "(adapters were listed or a device made); choose the implementation before that, "
                               f"or with {ENV}={name} in a new process")
        _state["chosen"] = name


def implementation() -> str:
    """The implementation in use ("wgpu-native" or "dawn"), or the one that will be used (the one set, else
    ``RLX_GPU_IMPLEMENTATION``, else "wgpu-native")."""
    return _state["name"] or _requested()


def load(name: str):
    """Import the module of implementation ``name`` without choosing it (versions, the Tint validator); a
    missing one is an ImportError saying how to install it."""
    name = _parse(name, "rlx_gpu.runtime.implementation.load")
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError as e:
        raise ImportError(f"the WebGPU implementation {name!r} needs the module {_MODULES[name]!r}, which is not "
                          f"importable ({e}): {_INSTALL[name]}") from e


def wgpu():
    """The wgpu-py API module of the implementation in use, imported (and, for Dawn, given its toggles) on the
    first call, which fixes the implementation for the process."""
    with _lock:
        if _state["module"] is None:
            name = _requested()
            mod = load(name)
            if name == "dawn":
                _dawn_toggles()
            _state["module"], _state["name"] = mod, name
        return _state["module"]


def _dawn_toggles() -> None:
    from wgpudawn.backends.dawn import extras
    try:
        extras.set_instance_extras(enable_toggles=list(DAWN_TOGGLES))
    except RuntimeError as e:  # the process made Dawn's instance itself before rlx_gpu did
        raise RuntimeError(f"rlx_gpu: Dawn's instance already exists, so rlx_gpu cannot give it its toggles "
                           f"{list(DAWN_TOGGLES)} ({e}); use rlx_gpu before requesting wgpudawn adapters yourself, "
                           "or call wgpudawn.backends.dawn.extras.set_instance_extras(enable_toggles=...) with "
                           "them first") from e


def versions(name: str | None = None) -> dict:
    """The versions of an implementation's parts ({"wgpu-py", "wgpu-native"} or {"wgpudawn", "dawn"}); the one in
    use by default. Imports the module, choosing nothing."""
    name = implementation() if name is None else _parse(name, "versions")
    mod = load(name)
    if name == "dawn":
        backend = importlib.import_module("wgpudawn.backends.dawn")
        return {"wgpudawn": mod.__version__, "dawn": backend.__version__}
    native = importlib.import_module("wgpu.backends.wgpu_native")
    return {"wgpu-py": mod.__version__, "wgpu-native": native.__version__}


def features(obj, name: str | None = None) -> set:
    """The features of an adapter or device, spelled as rlx_gpu spells them (see the module docstring)."""
    spelling = {v: k for k, v in _SPELLING[implementation() if name is None else name].items()}
    return {spelling.get(f, f) for f in obj.features}


def native_feature(feature: str, name: str | None = None) -> str:
    """The implementation's own name of one of rlx_gpu's feature names (to request it for a device)."""
    return _SPELLING[implementation() if name is None else name].get(feature, feature)


def subgroup_directive() -> bool:
    """Whether WGSL that uses subgroup operations must say ``enable subgroups;`` (Tint, on Dawn, asks for it; naga,
    on wgpu-native, refuses it and takes the operations without it)."""
    return implementation() == "dawn"


def properties(adapter) -> dict:
    """What the implementation says about an adapter beyond WebGPU: on Dawn its subgroup-matrix configurations
    (``subgroup_matrix_configs``: m, n, k, component and result types, subgroup sizes; with
    ``chromium-experimental-subgroup-matrix``) and the toggles enabled on it (``dawn_toggles``: ours and those Dawn
    enables itself); nothing on wgpu-native."""
    if implementation() != "dawn":
        return {}
    from wgpudawn.backends.dawn import extras
    props = extras.get_adapter_properties(adapter)
    out = {"subgroup_matrix_configs": props.get("subgroup_matrix_configs", [])}
    out["dawn_toggles"] = sorted(extras.get_toggles(adapter))
    return out


def toggles() -> tuple:
    """The Dawn toggles rlx_gpu sets (:data:`DAWN_TOGGLES`) when Dawn is in use, else ()."""
    return DAWN_TOGGLES if implementation() == "dawn" else ()


def skip_validation() -> bool:
    """Whether new devices get Dawn's ``skip_validation`` device toggle: only on Dawn, only when asked for with
    ``RLX_GPU_DAWN_SKIP_VALIDATION=1`` (docs/guides/webgpu-implementation.md, "Validation", says when that is safe)."""
    return implementation() == "dawn" and os.environ.get(SKIP_ENV, "").strip() == "1"


def robustness() -> bool:
    """Whether new devices clamp out-of-bounds accesses in shaders (WebGPU's robustness): always, except on Dawn with
    ``RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1`` (Dawn's ``disable_robustness`` device toggle; README, "Implementations"
    says what that costs and gives)."""
    return not (implementation() == "dawn" and os.environ.get(ROBUST_ENV, "").strip() == "1")


def request_device(adapter, required_features, required_limits, skip: bool = False, robust: bool = True):
    """``adapter.request_device_sync`` (features in rlx_gpu's spelling), with Dawn's ``skip_validation`` device
    toggle if ``skip`` and its ``disable_robustness`` if not ``robust`` (on Dawn only: see :func:`skip_validation`,
    :func:`robustness`)."""
    feats = [native_feature(f) for f in required_features]
    dawn_toggles = ([] if not skip else ["skip_validation"]) + ([] if robust else ["disable_robustness"])
    if not dawn_toggles or implementation() != "dawn":
        return adapter.request_device_sync(required_features=feats, required_limits=required_limits)
    from wgpudawn.backends.dawn import extras
    return extras.request_device_sync(adapter, required_features=feats, required_limits=required_limits,
                                      enable_toggles=dawn_toggles)


def gone(device) -> bool:
    """Whether wgpu-py has seen the device go: wgpu-native stops its poller in ``destroy()``; Dawn resolves the
    device-lost promise when it next processes events (every wait does)."""
    if getattr(device, "_poller", True) is None:
        return True
    promise = getattr(device, "_lost_promise", None)
    return promise is not None and getattr(promise, "_state", "pending") != "pending"


POLL_SLEEP = 1e-4  # seconds between the non-blocking polls of a pending map request


def poll_without_blocking(device) -> None:
    """Make wgpu-py resolve map requests with non-blocking polls.

    wgpu-py 0.32 resolves them on a thread that calls ``wgpuDevicePoll(wait=True)`` while any is pending. That
    wait holds the device's fence lock until the GPU is idle, so a ``queue.submit`` or ``write_buffer`` from the
    main thread stalls until then, and the GPU idles while the host prepares the next step. Checked steps keep a
    map request pending all the time (the outcome read back a step later), which made AdamW with GradScaler 0.3-1.2
    ms per step slower on the H200 than the check's own cost (PERF_NOTES.md 20). A poll that never waits, every
    0.1 ms while a request is pending, keeps the queue fed. Falls back to wgpu-py's own polling if its internals
    differ."""
    poller = getattr(device, "_poller", None)
    func = getattr(poller, "_poll_func", None)
    if func is None or getattr(func, "_rlx_nonblocking", False):
        return

    def poll(block, func=func):
        func(False)
        if block:
            time.sleep(POLL_SLEEP)
    poll._rlx_nonblocking, poll._rlx_original = True, func
    poller._poll_func = poll
