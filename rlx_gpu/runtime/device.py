"""Adapter and device selection, and the one place that talks to wgpu's device object.

``get_device(selector)`` returns a cached :class:`Device` for the adapter the selector picks:
``None`` (the ``RLX_GPU_ADAPTER`` environment variable, else the best adapter), a backend name
(``"vulkan"``, ``"metal"``, ``"dx12"``, ``"gl"``), ``"cpu"`` for a CPU adapter, ``"gpu"`` for any
hardware adapter, or a case-insensitive substring of the adapter's name. The device is requested
with the adapter's real limits (storage binding size, buffer size, storage buffers per stage, ...),
not wgpu's small defaults.
"""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from . import implementation as _impl
from . import settle as _settle
from ..core.lru import LRU
from .discovery import NoAdapterError, _describe, _select_at, _wgpu, adapters

__all__ = ["Device", "DeviceLostError", "NoAdapterError", "adapters", "get_device"]

class DeviceLostError(RuntimeError):
    """Raised when the wgpu device is gone (``destroy()``, a driver reset, a GPU removed). Everything on it is lost:
    make a new optimizer (from a checkpoint); ``get_device`` gives a fresh device for the same adapter."""


MODULES_KEPT, PIPELINES_KEPT = 128, 256  # per device: the least recently used beyond these are dropped

# wgpu-native's and Dawn's words for a device that is gone, in the validation errors of calls made on it
_LOST_WORDS = ("device is lost", "device lost", "parent device is lost", "device is invalid", "[device] is lost")


class Device:
    """A wgpu device with its limits, a pipeline cache and helpers for buffers.

    ``max_storage_binding`` may be lowered (never raised) to force arena chunking, e.g. in tests.
    """

    def __init__(self, adapter, *, _device=None, _shared=None, max_storage_binding: int | None = None):
        wgpu = _wgpu()
        self.adapter = adapter
        self.info = _describe(adapter)
        #: The WebGPU implementation the device runs on: "wgpu-native" or "dawn".
        self.implementation = _impl.implementation()
        self.position = 0  # (among the adapters found, best first: tells identical GPUs apart; get_device sets it)
        # On a CPU adapter device memory is host memory: arenas that the host can map directly make each
        # transfer one memcpy instead of two (measured on llvmpipe: 5-6 GB/s against 2-3 through staging).
        self.host_mappable = (self.info["type"] == "CPU" and "mappable-primary-buffers" in _impl.features(adapter))
        #: Whether Dawn skips its validation of this device's commands (RLX_GPU_DAWN_SKIP_VALIDATION=1;
        #: docs/guides/webgpu-implementation.md).
        self.skip_validation = _shared["skip_validation"] if _shared else _impl.skip_validation()
        #: Whether out-of-bounds accesses in shaders are clamped (False only on Dawn with
        #: RLX_GPU_DAWN_DISABLE_ROBUSTNESS=1: every kernel on the device unchecked, for the tensor cores' speed; README).
        self.robustness = _shared["robustness"] if _shared else _impl.robustness()
        if _device is None:
            _device = _request(adapter, self.host_mappable, self.skip_validation, self.robustness)
        self.wgpu = wgpu
        self.device = _device
        self.queue = _device.queue
        self.limits = dict(_device.limits)
        #: The device's features, spelled as rlx_gpu spells them on either implementation (``subgroups``, ...).
        self.features = _impl.features(_device)
        binding = min(self.limits["max-storage-buffer-binding-size"], self.limits["max-buffer-size"])
        if max_storage_binding is not None:
            binding = min(binding, int(max_storage_binding))
        self.max_storage_binding = binding
        # Tensor offsets inside arenas: the storage-offset alignment, at least 16 bytes (one vec4).
        self.alignment = max(16, int(self.limits["min-storage-buffer-offset-alignment"]))
        self.max_workgroups = int(self.limits["max-compute-workgroups-per-dimension"])
        #: float16 arenas are bound as array<vec4<f16>> where the adapter has shader-f16 (RLX_GPU_F16=packed turns
        #: that off: two float16 to a u32 then, as bfloat16 always is).
        self.native_f16 = "shader-f16" in self.features and os.environ.get("RLX_GPU_F16", "") != "packed"
        # Shared between views of the same wgpu device: pipelines, the staging buffers and the lock that
        # serialises their use ("io": transfers and read-backs from several threads), whether it is lost.
        # (pipelines and modules are bounded: a program compiling many distinct sources must not grow without end)
        self._shared = _shared if _shared is not None else {
            "pipelines": LRU(PIPELINES_KEPT), "modules": LRU(MODULES_KEPT), "lock": threading.RLock(),
            "io": threading.RLock(), "lost": None,
            "skip_validation": self.skip_validation, "robustness": self.robustness}
        if _shared is None and not self.host_mappable:
            # Staging buffers are made before any arena: on the H200, staging made after large buffers had
            # been freed left every kernel 10-25% slower for the life of the process (PERF_NOTES.md, 11).
            self.transfer.reserve()
        _settle.track(self)  # (its queue waited for at exit: rlx_gpu/runtime/settle.py)

    def __repr__(self):
        return f"<rlx_gpu.Device {self.info['name']} ({self.info['backend']}, {self.info['type']})>"

    @property
    def name(self) -> str:
        return self.info["name"]

    @property
    def subgroup_matrix_configs(self) -> list:
        """The adapter's subgroup-matrix configurations (dicts: ``component_type``, ``result_component_type``,
        ``m``, ``n``, ``k``, ``min_subgroup_size``, ``max_subgroup_size``) where this device has the feature
        ``chromium-experimental-subgroup-matrix`` (Dawn), else []."""
        if "smc" not in self._shared:
            has = "chromium-experimental-subgroup-matrix" in self.features
            self._shared["smc"] = _impl.properties(self.adapter).get("subgroup_matrix_configs", []) if has else []
        return list(self._shared["smc"])

    @property
    def wgpu_device(self):
        """The wgpu-py ``GPUDevice`` underneath, for your own pipelines and buffers (``rlx_gpu.Program`` wraps the
        common case); ``queue`` is its queue."""
        return self.device

    def encoder(self):
        """A new command encoder on this device (record :class:`rlx_gpu.Program` dispatches, then ``submit``)."""
        self.ensure_alive()
        try:
            return self.device.create_command_encoder()
        except Exception as e:
            self._failed(e)
            raise

    @property
    def io_lock(self):
        """The lock serialising host <-> device transfers on this device (its staging buffers are shared)."""
        return self._shared["io"]

    @property
    def lost(self) -> bool:
        """Whether the device is gone (destroyed, or a call on it failed because it was lost)."""
        if self._shared["lost"] is None and _impl.gone(self.device):
            self._mark_lost("the device was destroyed")
        return self._shared["lost"] is not None

    def _mark_lost(self, why: str) -> None:
        if self._shared["lost"] is None:
            self._shared["lost"] = why
            _forget(self)

    def ensure_alive(self) -> None:
        """Raise :class:`DeviceLostError` if the device is gone."""
        if self.lost:
            raise DeviceLostError(f"rlx_gpu: the wgpu device on {self.name} is lost ({self._shared['lost']}); its "
                                  "buffers are gone. Make a new optimizer (e.g. Optimizer.load from a checkpoint): "
                                  "get_device() now returns a fresh device")

    def _failed(self, e: Exception) -> None:
        """Turn an error of a call on a lost device into DeviceLostError (otherwise return)."""
        if any(w in str(e).lower() for w in _LOST_WORDS):
            self._mark_lost(str(e).strip().splitlines()[-1])
        try:
            self.device._poll()  # (delivers Dawn's device-lost callback, if that is why the call failed)
        except Exception:
            pass
        self.ensure_alive()

    def with_binding_cap(self, max_storage_binding: int) -> "Device":
        """A view of this device whose arenas are chunked at ``max_storage_binding`` bytes."""
        return Device(self.adapter, _device=self.device, _shared=self._shared,
                      max_storage_binding=max_storage_binding)

    def shader_module(self, code: str, label: str):
        """The compiled module of a WGSL source text (once per device and text)."""
        key = hashlib.sha1(code.encode()).hexdigest()
        mods = self._shared["modules"]
        with self._shared["lock"]:
            mod = mods.get(key)
            if mod is None:
                mod = mods[key] = self.device.create_shader_module(code=code, label=label)
            return mod

    # -- buffers -----------------------------------------------------------------------------
    def buffer(self, size: int, label: str, *, usage=None, data: np.ndarray | None = None, mappable=False):
        """A storage buffer of ``size`` bytes (rounded up to 16), zero-filled or holding ``data``.

        ``mappable``: on devices where the host can map storage buffers (CPU adapters), make it mappable so
        transfers copy straight in and out of it."""
        u = self.wgpu.BufferUsage
        usage = usage if usage is not None else (u.STORAGE | u.COPY_SRC | u.COPY_DST)
        if mappable and self.host_mappable:
            usage |= u.MAP_READ | u.MAP_WRITE
        size = max(16, -(-int(size) // 16) * 16)
        self.ensure_alive()
        try:
            buf = self.device.create_buffer(size=size, usage=usage, label=label)
        except Exception as e:
            self._failed(e)
            raise MemoryError(f"rlx_gpu: could not allocate {size} bytes for {label!r} on {self.name}: {e}") from e
        if data is not None and data.nbytes:
            self.queue.write_buffer(buf, 0, np.ascontiguousarray(data))
        return buf

    @property
    def transfer(self):
        """The device's :class:`rlx_gpu.transfer.Transfer` (persistent staging buffers, made on first use)."""
        if "transfer" not in self._shared:
            from .transfer import Transfer
            self._shared["transfer"] = Transfer(self)
        return self._shared["transfer"]

    def read(self, buf, offset: int = 0, size: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Read ``size`` bytes of ``buf`` from ``offset`` into ``out`` (a C-contiguous array of that many bytes,
        allocated as uint8 when not given)."""
        size = buf.size - offset if size is None else int(size)
        dest = np.empty(size, np.uint8) if out is None else out
        if not dest.flags.c_contiguous:
            raise ValueError("read: out must be a C-contiguous array")
        flat = dest.reshape(-1).view(np.uint8)
        if flat.nbytes != size:
            raise ValueError(f"read: out holds {flat.nbytes} bytes, expected {size}")
        self.transfer.download([(buf, offset, flat)])  # (takes the io lock)
        return dest

    def submit(self, encoder):
        self.ensure_alive()
        try:
            self.queue.submit([encoder.finish()])
        except Exception as e:
            self._failed(e)
            raise

    def sync(self, lock_timeout: float | None = None) -> bool:
        """Wait until the GPU has finished all submitted work; ``True`` when it did.

        ``lock_timeout``: seconds to wait for the transfer lock (:attr:`io_lock`) another thread may hold; ``None``
        (the default) waits as long as it takes. When the lock is not had in time, nothing is done and ``False`` is
        returned.

        (wgpu-py 0.32's ``on_submitted_work_done_sync`` fails with its bundled wgpu-native, so this maps a
        4-byte buffer after a copy queued behind everything else: the map completes when the queue is idle.)"""
        u = self.wgpu.BufferUsage
        self.ensure_alive()
        if not self.io_lock.acquire(timeout=-1 if lock_timeout is None else max(0.0, float(lock_timeout))):
            return False
        try:
            self._sync(u)
        except Exception as e:
            self._failed(e)
            raise
        finally:
            self.io_lock.release()
        return True

    def _sync(self, u):
        if "fence" not in self._shared:
            self._shared["fence"] = (self.device.create_buffer(size=16, usage=u.COPY_SRC | u.COPY_DST, label="fence"),
                                     self.device.create_buffer(size=16, usage=u.MAP_READ | u.COPY_DST, label="fence"))
        src, dst = self._shared["fence"]
        enc = self.device.create_command_encoder()
        enc.copy_buffer_to_buffer(src, 0, dst, 0, 16)
        self.queue.submit([enc.finish()])
        dst.map_sync("READ", 0, 16)
        dst.unmap()


def _request(adapter, host_mappable: bool, skip_validation: bool, robustness: bool):
    """A device on ``adapter`` with its real limits and the features rlx_gpu uses that it has."""
    lim, have = adapter.limits, _impl.features(adapter)
    required = {k: lim[k] for k in _impl.LIMITS if k in lim}
    feats = [f for f in _impl.FEATURES if f in have] + (["mappable-primary-buffers"] if host_mappable else [])
    device = _impl.request_device(adapter, feats, required, skip_validation, robustness)
    _impl.poll_without_blocking(device)
    return device


_cache: dict = {}
_cache_lock = threading.RLock()


def _forget(dev: Device) -> None:
    """Drop a lost device from the cache, so that the next get_device() makes a fresh one."""
    with _cache_lock:
        for k in [k for k, d in _cache.items() if d.device is dev.device]:
            del _cache[k]


def get_device(selector: "str | Device | None" = None) -> Device:
    """The cached :class:`Device` for ``selector`` (see the module docstring)."""
    if isinstance(selector, Device):
        return selector
    if selector is not None and not isinstance(selector, str):
        raise TypeError(f"device must be None, a string or an rlx_gpu.Device, got {type(selector).__name__}")
    if not selector:
        selector = os.environ.get("RLX_GPU_ADAPTER") or None
    key = (selector or "").strip().lower()
    with _cache_lock:
        dev = _cache.get(key)
        if dev is not None and dev.lost:  # (lost marks it and drops it from the cache)
            dev = None
        if dev is None:
            adapter, position = _select_at(selector)
            # One wgpu device per adapter, whichever selector reached it (identical GPUs have identical
            # descriptions: their position among the adapters tells them apart).
            for other in _cache.values():
                if other.adapter is adapter or (other.info == _describe(adapter) and other.position == position):
                    dev = other
                    break
            else:
                dev = Device(adapter)
                dev.position = position
            _cache[key] = dev
        return dev
