"""Dynamic loss scaling: ``GradScaler`` with torch.amp.GradScaler's semantics.

    scaler = rlx_gpu.GradScaler()
    loss_to_backprop = scaler.scale(loss)          # your autodiff then yields grads multiplied by the scale
    scaler.step(opt, grads)                        # unscales inside the kernel; skips the step on inf/NaN
    scaler.update()                                # backs off after a skip, grows after growth_interval clean steps

``step`` checks the grads on the device (a bit-pattern test of the u32 view: exponent all ones, since shader
compilers may assume floats are finite) before anything changes. When a grad holds inf or NaN, the step is
skipped whole: params, every state buffer and every step count stay bit-identical. Otherwise the kernels
multiply each grad by 1/scale (and by the clip factor, if the optimizer clips), so grads are never rewritten.

No step waits for the device: the skip is decided on the device, and the host learns each outcome a step
later. Until then the scale is one of two values (backed off or not); the next step carries both and the
device picks (see ``Optimizer._step``). ``get_scale()``, ``scale()`` and ``state_dict()`` read the outcomes back:
scaling a loss needs the scale as a number, so a loop that calls ``scale(loss)`` every step waits there for the
previous step to finish (its loss is on the host anyway); ``step`` and ``update`` never wait.
"""
from __future__ import annotations

import math

__all__ = ["GradScaler"]


class _Known:
    """The outcome of a NumPy twin's step (known at once)."""
    settled = True

    def __init__(self, skipped):
        self.skipped = skipped


class GradScaler:
    """torch.amp.GradScaler's dynamic loss scaling for the GPU optimizers and the NumPy twins."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        if not (growth_factor > 1.0):
            raise ValueError(f"The growth factor must be > 1.0, got {growth_factor}")
        if not (0.0 < backoff_factor < 1.0):
            raise ValueError(f"The backoff factor must be < 1.0 and > 0, got {backoff_factor}")
        if not (isinstance(growth_interval, int) and growth_interval > 0):
            raise ValueError(f"growth_interval must be a positive int, got {growth_interval}")
        if not (math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"init_scale must be finite and > 0, got {init_scale}")
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._enabled = enabled
        self._found = []   # outcomes of the steps since the last update()
        self._cycles = []  # per update() whose rule is not applied yet (oldest first): that cycle's outcomes

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled); reads back the outcomes of steps not yet known on the host."""
        self._settle_all()
        return self._scale if self._enabled else 1.0

    def scale(self, value):
        """``value`` (a loss: float or array) multiplied by the current scale."""
        return value * self.get_scale() if self._enabled else value

    def step(self, optimizer, grads=None):
        """Unscale inside the kernels and step, or skip the whole step if any grad is inf or NaN."""
        if not self._enabled:
            return optimizer.step(grads)
        while len(self._cycles) > 1:  # steps at least two back: long finished, read without waiting
            self._apply(self._cycles.pop(0))
        last = self._cycles[0] if len(self._cycles) == 1 and len(self._cycles[0]) == 1 else None
        unsettled = getattr(optimizer, "_unsettled", None)
        if last is not None and not last[0].settled and unsettled and unsettled[-1][2] is last[0]:
            # the scale depends on the optimizer's newest step, whose outcome is not read back yet: the step
            # carries the unscale factor for both outcomes and the device picks
            inv = tuple(1.0 / self._rule(self._scale, self._growth_tracker, o)[0] for o in (False, True))
        else:
            self._settle_all()
            inv = 1.0 / self._scale
        out = optimizer._step(grads, inv, check=True)
        self._found.append(out if not isinstance(out, bool) else _Known(not out))
        return None

    def update(self, new_scale=None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean steps (torch's rule)."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._settle_all()
            self._scale = float(new_scale)
            self._found = []
        elif self._found:
            self._cycles.append(self._found)
            self._found = []

    def _rule(self, scale, tracker, found_inf):
        if found_inf:
            return scale * self._backoff_factor, 0
        tracker += 1
        if tracker == self._growth_interval:
            return scale * self._growth_factor, 0
        return scale, tracker

    def _apply(self, found):
        inf = any(o.skipped for o in found)
        self._scale, self._growth_tracker = self._rule(self._scale, self._growth_tracker, inf)

    def _settle_all(self):
        """Apply the update rule of every finished cycle, reading back the outcomes it needs."""
        while self._cycles:
            self._apply(self._cycles.pop(0))

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        self._settle_all()
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        if not self._enabled:
            return
        self._cycles, self._found = [], []
        self._scale = float(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
