"""The thread-safety contract in one place: every public call of an optimizer (GPU class or twin) and of a
GradScaler runs under the object's own re-entrant ``lock``, so one object used from several threads is
serialised; the device's transfers run under its ``io_lock`` (the staging buffers are shared), so several
objects on one device may be used from several threads. Hold ``opt.lock`` yourself to make a sequence of
calls atomic (``with opt.lock: params = opt.read_params(); sd = opt.state_dict()``)."""
from __future__ import annotations

import functools


def locked(fn):
    """Method decorator: run under ``self.lock``, after checking that ``self.device`` (if any) is alive; an error
    of the call on a device found lost meanwhile becomes the device's DeviceLostError (Dawn reports a destroyed
    device at the next call that waits, not at once)."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            dev = getattr(self, "device", None)
            if dev is None:
                return fn(self, *args, **kwargs)
            dev.ensure_alive()
            try:
                return fn(self, *args, **kwargs)
            except Exception as e:
                dev._failed(e)
                raise
    return wrapper
