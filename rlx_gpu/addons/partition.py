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

from ..core.partition import PartitionBase
from ..core.torchcontract import TorchAware
from ..core.torchpartition import PartitionContract
from ..engine import Optimizer, StepGroup

__all__ = ["Partition"]


class Partition(PartitionBase, metaclass=TorchAware):
    """Sub-optimizers over the tensors ``label(name, shape)`` assigns them, stepped in one submission.
    ``optimizers``: label -> (GPU optimizer class, its keyword arguments) (not ``clip_grad_norm``/``skip_nonfinite``/
    ``device``: those are this object's). ``params``: what every optimizer takes (a dict name -> array, torch's
    ``model.parameters()``/``named_parameters()``, param groups); every part on one device (``device``). Built
    from torch tensors it is a ``torch.optim.Optimizer`` (``rlx_gpu.torch.Partition``). Routing, groups, state
    dicts and checkpoints: :mod:`rlx_gpu.core.partition`; the twin: ``rlx_gpu.reference.Partition``."""

    steps_on_device = True  # (rlx_gpu.GradScaler keeps its state on the device for it, as for an Optimizer)
    torch_contract = PartitionContract

    def _part_class(self, key, cls):
        if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
            raise TypeError(f"Partition: optimizers[{key!r}] must be (a GPU optimizer class, kwargs)")
        return cls

    def _make_part(self, cls, groups, kw):
        # (type.__call__: a part built from torch tensors stays a plain optimizer; this object is the torch one)
        return type.__call__(cls, groups, clip_grad_norm=self.clip_grad_norm, skip_nonfinite=self.skip_nonfinite,
                             **kw)

    def __init__(self, params, label, optimizers: dict, *, device=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, label, optimizers, device=device, clip_grad_norm=clip_grad_norm,
                         skip_nonfinite=skip_nonfinite)
        self._group = StepGroup(list(self.parts.values()))
        self._last_skipped = False

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
    def step(self, grads: dict | None = None, *, loss_scale=None, closure=None):
        """One step of every part with a grad (``grads``: dict name -> array or DeviceTensor; None: every part from
        its device slots, or built from torch tensors their ``.grad``), in one submission; ``closure`` (or a
        callable as ``grads``): called first, its loss returned."""
        if callable(grads) and closure is None:
            closure, grads = grads, None
        loss = None
        if closure is not None:
            loss = self._call_closure(closure)
        if self._torch and grads is None:
            grads = {}
            for p in self.parts.values():
                grads.update(p.torch_grads())
        routed = {k: None for k in self.parts} if grads is None else self._route(grads)
        if routed:
            self._group.step({self.parts[k]: g for k, g in routed.items()}, loss_scale=loss_scale)
        for k in routed:
            self.parts[k].torch_write_back()
        return loss
