"""rlx_gpu's optimizers as ``torch.optim.Optimizer`` subclasses, for torch's own tools.

torch's LR schedulers and ``torch.amp.GradScaler`` check ``isinstance(opt, torch.optim.Optimizer)``; the classes
here pass that check and step through rlx_gpu's engine on its device::

    import rlx_gpu.torch
    opt = rlx_gpu.torch.AdamW(model.parameters(), lr=1e-3)        # any rlx_gpu optimizer by name
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); sched.step(); opt.zero_grad()

Each wraps an rlx_gpu optimizer (``opt.engine``) built from the same tensors: ``step(closure=None)`` copies the
groups' hyperparameters (what a scheduler changed) into it, steps from the tensors' ``.grad`` and writes the new
values into the tensors. ``state_dict()``/``load_state_dict()`` use torch's format (:mod:`rlx_gpu.interop`), so
they are interchangeable with torch.optim's. ``rlx_gpu.<Name>`` itself also takes torch tensors and runs the
plain ``loss.backward(); opt.step(); opt.zero_grad()`` loop; these classes are for the tools that need the type.
Importing this module imports torch.
"""
from __future__ import annotations

import torch

from .. import optim as _optim
from ..core import options as _options
from .interop import from_torch_state_dict, to_torch_state_dict

__all__ = list(_optim.__all__)


def _plain(v):
    """A hyperparameter as rlx_gpu takes it: tensors (torch accepts ``lr=torch.tensor(...)``) as floats, lists of
    numbers as tuples."""
    if isinstance(v, torch.Tensor):
        return float(v)
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    return v


class _Wrapped(torch.optim.Optimizer):
    _engine_cls = None

    def __init__(self, params, *args, **kwargs):
        cls = self._engine_cls
        args = tuple(_plain(a) for a in args)
        kwargs = {k: (_plain(v) if k in cls.spec.defaults else v) for k, v in kwargs.items()}
        hyper, opts = _options.split(cls.__name__, cls.spec.defaults, args, kwargs, gpu=True)
        super().__init__(params, {**cls.spec.defaults, **hyper})
        groups = [{"params": g["params"], **{h: g[h] for h in cls.spec.defaults}} for g in self.param_groups]
        #: The rlx_gpu optimizer doing the work (its params are named "0", "1", ... as torch numbers them).
        self.engine = cls(groups, **opts)

    def add_param_group(self, param_group: dict) -> None:
        if hasattr(self, "engine"):  # (torch's constructor adds the first groups)
            raise NotImplementedError(f"rlx_gpu.torch.{type(self).__name__}: groups are fixed once made; build a "
                                      "new optimizer with every group (its state dict carries over)")
        super().add_param_group(param_group)

    def _sync_hyperparameters(self) -> None:
        for g, eg in zip(self.param_groups, self.engine.param_groups):
            for h in self.engine.defaults:
                eg[h] = _plain(g[h])

    @torch.no_grad()
    def step(self, closure=None):
        self._sync_hyperparameters()
        return self.engine.step(closure=closure)  # (the closure runs with grad enabled)

    def state_dict(self) -> dict:
        self._sync_hyperparameters()
        sd = to_torch_state_dict(self.engine, like=self)
        for g, mine in zip(sd["param_groups"], self.param_groups):  # scheduler keys (initial_lr, ...) as torch keeps
            for k, v in mine.items():
                if k != "params":
                    g.setdefault(k, v)
        return sd

    def load_state_dict(self, state_dict: dict) -> None:
        self.engine.load_state_dict(from_torch_state_dict(state_dict, self.engine))
        for g, saved in zip(self.param_groups, state_dict["param_groups"]):
            g.update({k: v for k, v in saved.items() if k != "params"})


for _name in _optim.__all__:
    _engine = getattr(_optim, _name)
    globals()[_name] = type(_name, (_Wrapped,), {
        "_engine_cls": _engine, "__module__": __name__,
        "__doc__": f"rlx_gpu.{_name} as a torch.optim.Optimizer (see :mod:`rlx_gpu.torch`).\n\n{_engine.__doc__}"})
del _name, _engine
