"""Settling the devices' work as the interpreter exits.

A driver may still be running or compiling submitted work on its own threads when a script ends right after a
step. If the process's native libraries are torn down meanwhile (C++ static destructors, after Python's exit
handlers), the process can crash: lavapipe's LLVM JIT-compiling a pipeline of the last step while torch's and
LLVM's static objects are destroyed (measured on llvmpipe, Mesa 25.0.7, torch imported, the shader cache cold: 5
of 6 runs ended in SIGSEGV; 0 of 6 after waiting). So every :class:`~rlx_gpu.runtime.device.Device` is tracked
(weakly) and, at exit, each live wgpu device's queue is waited for once. The handler is registered when the first
device is made, after wgpu's own exit handlers (wgpu-py's poller stops at its exit handler), so it runs before
them. A lost device, or one whose transfer lock another thread holds for more than :data:`LOCK_WAIT_S`, is left
as it is.
"""
from __future__ import annotations

import atexit
import threading
import weakref

__all__ = ["track", "settle_all", "LOCK_WAIT_S"]

LOCK_WAIT_S = 5.0  # seconds to wait for a device's transfer lock at exit before leaving that device unsettled

_live: "weakref.WeakSet" = weakref.WeakSet()
_registered = False
_lock = threading.Lock()


def track(dev) -> None:
    """Settle ``dev``'s queue at interpreter exit (a weak reference: a device dropped before is not kept)."""
    global _registered
    with _lock:
        _live.add(dev)
        if not _registered:
            atexit.register(settle_all)
            _registered = True


def settle_all() -> int:
    """Wait for the submitted work of every live tracked device (once per wgpu device); the number settled.
    Errors (a device lost meanwhile) are swallowed: this runs as the interpreter exits."""
    with _lock:
        devices = list(_live)
    seen, settled = set(), 0
    for dev in devices:
        key = id(dev.device)
        if key in seen:
            continue
        seen.add(key)
        try:
            if not dev.lost and dev.sync(lock_timeout=LOCK_WAIT_S):
                settled += 1
        except Exception:
            pass
    return settled
