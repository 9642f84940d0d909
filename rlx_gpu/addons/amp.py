"""Dynamic loss scaling: ``GradScaler`` with torch.amp.GradScaler's semantics.

    scaler = rlx_gpu.GradScaler()
    loss_to_backprop = scaler.scale(loss)          # your autodiff then yields grads multiplied by the scale
    scaler.step(opt, grads)                        # unscales inside the kernel; skips the step on inf/NaN
    scaler.update()                                # backs off after a skip, grows after growth_interval clean steps

``step`` checks the grads on the device (a bit-pattern test of the u32 view: exponent all ones, since shader
compilers may assume floats are finite) before anything changes. When a grad holds inf or NaN, the step is
skipped whole: params, every state buffer and every step count stay bit-identical. Otherwise the kernels
multiply each grad by 1/scale (and by the clip factor, if the optimizer clips), so grads are never rewritten.

With a GPU optimizer the scaler's state (scale, growth tracker, found-inf flag) lives in a small device buffer,
as torch keeps it in tensors: the step reads 1/scale there, a skip sets the flag there, and ``update()`` runs
torch's rule there (``shaders/amp.wgsl``), so neither waits for the GPU. ``get_scale()``, ``scale()`` (for a host
loss) and ``state_dict()`` read the buffer back, which waits for the work queued before them; backward code on the
device can bind the scale instead (``scale_binding()``). With the NumPy twins the same rule runs on the host.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from ..core.groups import F32_MAX
from ..core.sync import locked
from ..engine import Optimizer
from ..engine.gating import LOSS_SCALE_HEAD
from ..runtime.device import get_device
from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare

__all__ = ["GradScaler"]

F32 = np.float32
#: The scaler's device state, by name (shaders/amp.wgsl ``ls``); it begins with the device loss-scale protocol's
#: fields (LOSS_SCALE_HEAD: rlx_gpu/engine/steps.py; shaders/gate.wgsl reads them by name).
LOSS_SCALE = Params("LossScale", *LOSS_SCALE_HEAD, "growth:f32", "backoff:f32", "interval")
declare("amp.wgsl", LOSS_SCALE)


def _check_settings(scale, growth_factor, backoff_factor, growth_interval) -> None:
    """torch's checks of a scaler's settings (and a finite, positive scale); ValueError naming the first bad one."""
    def number(x):
        return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
    if not (number(growth_factor) and growth_factor > 1.0):
        raise ValueError(f"The growth factor must be > 1.0, got {growth_factor}")
    if not (number(backoff_factor) and 0.0 < backoff_factor < 1.0):
        raise ValueError(f"The backoff factor must be < 1.0 and > 0, got {backoff_factor}")
    if not (isinstance(growth_interval, (int, np.integer)) and not isinstance(growth_interval, bool)
            and growth_interval > 0):
        raise ValueError(f"growth_interval must be a positive int, got {growth_interval}")
    if not (number(scale) and math.isfinite(scale) and 0 < scale <= F32_MAX):
        raise ValueError(f"init_scale must be finite and > 0 (and within float32's range), got {scale!r}")


class GradScaler:
    """torch.amp.GradScaler's dynamic loss scaling for the GPU optimizers and the NumPy twins.

    The rule (torch's): a step whose grads hold inf or NaN is skipped and the scale multiplied by
    ``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by ``growth_factor``.

    Args:
        init_scale (2**16): the first scale.  growth_factor (2.0, > 1), backoff_factor (0.5, in (0, 1)),
        growth_interval (2000, a positive int), enabled (True; False: scale 1, no checks, ``step`` is a plain step).
    Methods: ``scale(loss)`` (loss * scale), ``step(opt, grads=None)`` (checks, unscales in the kernels, skips on
    inf/NaN), ``update()``, ``get_scale()``, ``scale_binding()`` (the scale as one f32 on the device, for
    backward kernels), ``state_dict()``/``load_state_dict()`` (torch's keys), ``lock``.
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        _check_settings(init_scale, growth_factor, backoff_factor, growth_interval)
        #: Serialises this scaler's calls (re-entrant); hold it to make step() and update() one unit.
        self.lock = threading.RLock()
        self._scale = F32(init_scale)  # float32, as torch's scale tensor
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._enabled = enabled
        self._found_inf = False  # host mode: a step since the last update() was skipped
        self._steps = 0          # steps since the last update()
        self._dev = None         # device mode: the device holding the state, and the buffer
        self._buf = None
        self._pending_update = False  # device mode: an update() not yet dispatched
        self._bound = False           # scale_binding() was handed out

    # -- where the state lives --------------------------------------------------------------------------
    def _words(self) -> np.ndarray:
        return LOSS_SCALE.pack(scale=self._scale, tracker=self._growth_tracker, found=int(self._found_inf),
                               growth=self._growth_factor, backoff=self._backoff_factor,
                               interval=self._growth_interval)

    def _attach(self, device):
        """Move the state to ``device`` (first GPU use); later steps must use the same device."""
        if self._buf is None:
            self._dev = device
            self._buf = device.buffer(LOSS_SCALE.nbytes, "GradScaler", data=self._words())
            self._update = shipped_kernel(device, "amp.wgsl", "update_scale")
            self._update_bind = self._update.bind({"ls": self._buf})
        elif device.device is not self._dev.device:
            raise ValueError(f"GradScaler: its state lives on {self._dev.name}; cannot step an optimizer on "
                             f"{device.name}")

    # -- the device loss-scale protocol an optimizer's step uses (rlx_gpu/engine/steps.py) ------------------
    @property
    def buffer(self):
        """The device buffer of the state: word 0 the scale (float32), word 2 the found-inf flag."""
        return self._buf

    def encode_pending(self, recorder) -> None:
        """Record the update() still pending (torch's rule on the device) at the start of a step's pass."""
        if self._pending_update:
            self._update.dispatch(recorder, self._update_bind, 1)

    def committed(self) -> None:
        """The step that recorded the pending update() was submitted (a step that fails leaves it pending)."""
        self._pending_update = False

    def _flush(self) -> None:
        if self._pending_update:
            enc = self._dev.device.create_command_encoder()
            self.encode_pending(enc)
            self._dev.submit(enc)
            self.committed()

    def _read(self):
        """Host copies of the state from the device buffer."""
        if self._buf is not None:
            self._flush()
            w = LOSS_SCALE.unpack(self._dev.read(self._buf, 0, LOSS_SCALE.nbytes))
            self._scale = F32(w["scale"])
            self._growth_tracker = int(w["tracker"])
            self._found_inf = bool(w["found"])

    # -- torch's API ----------------------------------------------------------------------------------
    def is_enabled(self) -> bool:
        return self._enabled

    @locked
    def get_scale(self) -> float:
        """The current scale (1.0 when disabled); with a GPU optimizer, read back from the device."""
        if not self._enabled:
            return 1.0
        self._read()
        return float(self._scale)

    @locked
    def scale(self, value):
        """``value`` (a loss: float or array) multiplied by the current scale (read back from the device)."""
        return value * self.get_scale() if self._enabled else value

    @locked
    def scale_binding(self, device=None) -> dict:
        """The ``{"buffer", "offset", "size"}`` of the current scale (one f32 on the device), for backward code
        that runs on the device and scales its loss gradient there, so that no step waits for the host.
        ``device``: where to keep the state if no optimizer has been stepped yet (default: rlx_gpu's device)."""
        if self._buf is None:
            self._attach(get_device(device))
        self._bound = True  # from now on update() dispatches its kernel at once (one more submit per step)
        return {"buffer": self._buf, "offset": 0, "size": 4}

    @locked
    def step(self, optimizer, grads=None):
        """Unscale inside the kernels and step, or skip the whole step if any grad is inf or NaN."""
        if not self._enabled:
            return optimizer.step(grads)
        if isinstance(optimizer, Optimizer) or getattr(optimizer, "steps_on_device", False):  # (or a Partition)
            self._attach(optimizer.device)
            optimizer.step(grads, loss_scale=self)
        else:
            if self._buf is not None:
                raise ValueError("GradScaler: its state lives on a GPU device; use a separate scaler for twins")
            optimizer.step(grads, loss_scale=float(self._scale))
            if optimizer.last_step_skipped:
                self._found_inf = True
        self._steps += 1
        return None

    @locked
    def update(self, new_scale=None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean steps (torch's rule)."""
        if not self._enabled:
            return
        if new_scale is not None:  # torch: the scale is set, the growth tracker kept, this cycle's skips dropped
            self._scale, self._found_inf = F32(new_scale), False
            self._pending_update = False
            if self._buf is not None:
                self._dev.queue.write_buffer(self._buf, LOSS_SCALE.offset("scale"), np.array([self._scale], F32))
                self._dev.queue.write_buffer(self._buf, LOSS_SCALE.offset("found"), np.zeros(1, np.uint32))
        elif self._steps:
            if self._buf is not None:
                self._pending_update = True  # dispatched at the start of the next step, or by _flush
                if self._bound:
                    self._flush()  # backward code reads the scale before the next step: update it now
            else:
                if self._found_inf:
                    self._scale, self._growth_tracker = F32(self._scale * F32(self._backoff_factor)), 0
                else:
                    self._growth_tracker += 1
                    if self._growth_tracker == self._growth_interval:
                        grown = F32(self._scale * F32(self._growth_factor))
                        if np.isfinite(grown):
                            self._scale = grown
                        self._growth_tracker = 0
                self._found_inf = False
        self._steps = 0

    def _write(self):
        if self._buf is not None:
            self._dev.queue.write_buffer(self._buf, 0, self._words())

    @locked
    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        self._read()
        return {"scale": float(self._scale), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    @locked
    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s values, checked as the constructor checks them (and the growth tracker a
        count >= 0) before any changes."""
        if not self._enabled:
            return
        keys = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
        if not isinstance(state, dict) or any(k not in state for k in keys):
            raise ValueError(f"GradScaler.load_state_dict: expected a dict with {list(keys)}, got "
                             f"{sorted(state) if isinstance(state, dict) else type(state).__name__}")
        try:
            _check_settings(state["scale"], state["growth_factor"], state["backoff_factor"], state["growth_interval"])
        except ValueError as e:
            raise ValueError(f"GradScaler.load_state_dict: {e}") from None
        t = state["_growth_tracker"]
        if not (isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 0):
            raise ValueError(f"GradScaler.load_state_dict: _growth_tracker must be an int >= 0, got {t!r}")
        self._scale = F32(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
        self._found_inf, self._steps, self._pending_update = False, 0, False
        self._write()
