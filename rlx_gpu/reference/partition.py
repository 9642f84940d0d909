"""NumPy twin of :class:`rlx_gpu.Partition`: the parts are twins, and the step is the specification of the GPU
class's one-submission step.

    grads routed to the parts by tensor name; every part's grads checked before any part steps
    skip_nonfinite / a loss scale: any inf or NaN in any part's grads skips every part (nothing changes)
    clip_grad_norm: total = torch's total norm over every part's (unscaled) grads; c = min(max / (total + 1e-6), 1)
    each part steps with its grads times 1/scale times c
"""
from __future__ import annotations

import numpy as np

from ..core.numerics import clip_coef, host_loss_scale, host_total_norm
from ..core.partition import PartitionBase
from .base import F32, ReferenceOptimizer

__all__ = ["Partition"]


class Partition(PartitionBase):
    """The NumPy twin of ``rlx_gpu.Partition``: the same constructor (``optimizers``: label -> (a GPU class or its
    twin, keyword arguments); the parts are the twins), ``step``, ``params``, ``param_groups``, state dicts and
    checkpoints, with the global clip and inf/NaN skip computed on the host (see the module docstring)."""

    on_device = False
    steps_on_device = False

    def _part_class(self, key, cls):
        twin = cls if isinstance(cls, type) and issubclass(cls, ReferenceOptimizer) else getattr(cls, "spec", None)
        if not (isinstance(twin, type) and issubclass(twin, ReferenceOptimizer)):
            raise TypeError(f"Partition: optimizers[{key!r}] must be (an optimizer class or its twin, kwargs)")
        return twin

    def _make_part(self, cls, groups, kw):
        kw.pop("device", None)
        return cls(groups, **kw)  # (the clip and the inf/NaN skip are the Partition's: global)

    def __init__(self, params, label, optimizers: dict, *, device=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, label, optimizers, device=device, clip_grad_norm=clip_grad_norm,
                         skip_nonfinite=skip_nonfinite)
        self._last_norm = None
        self.last_step_skipped = False

    def last_grad_norm(self):
        """The global grad norm the last step clipped with (NaN after a skipped clipping step; None without)."""
        return None if self._last_norm is None else float(self._last_norm)

    def step(self, grads: dict | None = None, *, loss_scale=None, closure=None):
        """One step of every part with a grad (see the module docstring); ``closure``'s loss returned."""
        if callable(grads) and closure is None:
            closure, grads = grads, None
        loss = self._call_closure(closure) if closure is not None else None
        if grads is None:
            grads = {}
            for p in self.parts.values():
                grads.update(p._torch_prologue(None, None)[1] if p._torch else p.grads)
        routed = self._route(grads)
        slots = {k: self.parts[k]._slot_grads(g) for k, g in routed.items()}  # (every part checked first)
        inv = host_loss_scale("Partition", loss_scale)
        check = self.skip_nonfinite or loss_scale is not None
        with np.errstate(over="ignore", invalid="ignore"):
            g32 = [np.asarray(a).astype(F32) for s in slots.values() for a in s.values()]
            self.last_step_skipped = check and not all(np.isfinite(a).all() for a in g32)
            if self.last_step_skipped:
                self._last_norm = F32(np.nan) if self.clip_grad_norm is not None else None
                return loss
            c, self._last_norm = F32(1.0), None
            if self.clip_grad_norm is not None:
                self._last_norm = host_total_norm([a * F32(inv) for a in g32])
                c = clip_coef(self._last_norm, self.clip_grad_norm)
        for k, s in slots.items():
            self.parts[k]._step(s, float(np.float64(F32(inv)) * np.float64(c)), False)
            self.parts[k]._torch_epilogue()
        return loss
