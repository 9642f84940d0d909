"""One optimizer over several: tensors routed to sub-optimizers by a label (optax.partition; the Muon recipe).

    opt = rlx_gpu.Partition(params, label=lambda name, shape: "muon" if len(shape) == 2 and "h." in name else "adamw",
                            optimizers={"muon": (rlx_gpu.Muon, {"lr": 0.02}), "adamw": (rlx_gpu.AdamW, {"lr": 3e-4})},
                            clip_grad_norm=1.0)
    opt.step(grads)                  # every part recorded into one command buffer, one submission

A step records each part's grad uploads and its pass over the grads (norm, inf/NaN check), then one dispatch
(``shaders/partition.wgsl``) that makes the clip's norm and the skip verdict global across the parts, then each
part's update, gated on the verdict; one submission. ``clip_grad_norm`` clips with the norm over every part's
grads; with ``skip_nonfinite`` or a GradScaler (``scaler.step(opt, grads)``) a step with inf/NaN in any part is
skipped in every part. At most four parts (rlx_gpu.engine.StepGroup, which does all of this).
"""
from __future__ import annotations

import numpy as np

from ..engine import Optimizer, StepGroup

__all__ = ["Partition"]

MAX_PARTS = 4


class Partition:
    """Sub-optimizers over the tensors ``label(name, shape)`` assigns them. ``optimizers``: label -> (GPU optimizer
    class, its keyword arguments) (not ``clip_grad_norm``/``skip_nonfinite``/``device``: those are this object's).
    ``params``: dict name -> array (every part on one device: ``device``)."""

    steps_on_device = True  # (rlx_gpu.GradScaler keeps its state on the device for it, as for an Optimizer)

    def __init__(self, params: dict, label, optimizers: dict, *, device=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        if not callable(label):
            raise TypeError("Partition: label must be a callable (name, shape) -> a key of optimizers")
        if not optimizers or len(optimizers) > MAX_PARTS:
            raise ValueError(f"Partition: 1 to {MAX_PARTS} sub-optimizers, got {len(optimizers)}")
        routed: dict = {k: {} for k in optimizers}
        for n, a in params.items():
            if not isinstance(a, np.ndarray):
                raise TypeError(f"Partition: {n!r} must be a NumPy array (torch tensors: build the parts' optimizers "
                                f"from arrays and copy .grad in), got {type(a).__name__}")
            k = label(n, tuple(np.shape(a)))
            if k not in optimizers:
                raise ValueError(f"Partition: label gave {k!r} for {n!r}; expected one of {sorted(optimizers)}")
            routed[k][n] = a
        self.parts: dict = {}
        dev = device
        for k, spec in optimizers.items():
            cls, kw = spec if isinstance(spec, tuple) else (spec, {})
            if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
                raise TypeError(f"Partition: optimizers[{k!r}] must be (a GPU optimizer class, kwargs)")
            clash = {"clip_grad_norm", "skip_nonfinite", "device"} & set(kw)
            if clash:
                raise ValueError(f"Partition: optimizers[{k!r}] sets {sorted(clash)}; give them to Partition")
            if not routed[k]:
                continue  # (a label nothing was routed to)
            self.parts[k] = cls(routed[k], device=dev, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite,
                                **kw)
            dev = self.parts[k].device
        if not self.parts:
            raise ValueError("Partition: no params")
        self.device = dev
        self.clip_grad_norm, self.skip_nonfinite = clip_grad_norm, skip_nonfinite
        self._part_of = {n: k for k, p in self.parts.items() for n in p.params}
        self._group = StepGroup(list(self.parts.values()))

    # -- what a user reads -----------------------------------------------------------------------------------------
    @property
    def params(self) -> dict:
        return {n: t for p in self.parts.values() for n, t in p.params.items()}

    @property
    def grads(self) -> dict:
        return {n: t for p in self.parts.values() for n, t in p.grads.items()}

    @property
    def param_groups(self) -> list:
        """Every part's groups (the same dicts: a schedule or a write changes that part's group)."""
        return [g for p in self.parts.values() for g in p.param_groups]

    def read_params(self) -> dict:
        return {n: a for p in self.parts.values() for n, a in p.read_params().items()}

    def set_lr(self, lr: float) -> None:
        for p in self.parts.values():
            p.set_lr(lr)

    def set_lr_scale(self, lr_scale: dict) -> None:
        """Replace the per-tensor lr factors (dict name -> factor; missing names 1), routed to the parts."""
        routed = self._route(lr_scale, "lr_scale")
        for k, p in self.parts.items():
            p.set_lr_scale(routed.get(k, {}))

    @property
    def last_step_skipped(self) -> bool:
        return any(p.last_step_skipped for p in self.parts.values())

    def last_grad_norm(self):
        return next(iter(self.parts.values())).last_grad_norm()

    def memory(self) -> dict:
        out: dict = {}
        for p in self.parts.values():
            for k, v in p.memory().items():
                out[k] = out.get(k, 0) + v
        return out

    # -- the step --------------------------------------------------------------------------------------------------
    def _route(self, grads: dict, what: str = "grads") -> dict:
        unknown = [n for n in grads if n not in self._part_of]
        if unknown:
            raise KeyError(f"Partition: {what} for unknown tensor(s) {unknown}")
        out: dict = {}
        for n, g in grads.items():
            out.setdefault(self._part_of[n], {})[n] = g
        return out

    def step(self, grads: dict | None = None, *, loss_scale=None) -> None:
        """One step of every part with a grad (``grads``: dict name -> array or DeviceTensor; None: every part from
        its device slots), in one submission."""
        routed = {k: None for k in self.parts} if grads is None else self._route(grads)
        self._group.step({self.parts[k]: g for k, g in routed.items()}, loss_scale=loss_scale)

    # -- state -----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"parts": {label: that part's state_dict()}}``."""
        return {"parts": {k: p.state_dict() for k, p in self.parts.items()}}

    def load_state_dict(self, sd: dict) -> None:
        parts = sd.get("parts") if isinstance(sd, dict) else None
        if not isinstance(parts, dict) or set(parts) != set(self.parts):
            raise ValueError(f"Partition.load_state_dict: expected {{'parts': {{...}}}} with {sorted(self.parts)}")
        for k, p in self.parts.items():
            p.load_state_dict(parts[k])

    def save(self, path) -> None:
        """One checkpoint per part: ``<path>.<label>.npz``."""
        import os
        for k, p in self.parts.items():
            p.save(f"{os.fspath(path)}.{k}.npz")

    def restore(self, path) -> None:
        import os
        for k, p in self.parts.items():
            p.restore(f"{os.fspath(path)}.{k}.npz")
