"""rlx_gpu's optimizers as ``torch.optim.Optimizer`` subclasses: ``rlx_gpu.torch.<Name>``.

``rlx_gpu.<Name>(model.parameters())`` already makes one of these (an optimizer built from torch tensors is an
instance of its class's torch flavour); the names here are for code that wants the type itself::

    import rlx_gpu.torch
    opt = rlx_gpu.torch.AdamW(model.parameters(), lr=1e-3)        # the same as rlx_gpu.AdamW(model.parameters())
    assert isinstance(opt, torch.optim.Optimizer) and isinstance(opt, rlx_gpu.AdamW)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(loss).backward(); scaler.step(opt); scaler.update(); sched.step(); opt.zero_grad()

Each class is a subclass of ``rlx_gpu.<Name>`` and of ``torch.optim.Optimizer``
(:mod:`rlx_gpu.core.torchcontract`): torch's groups in ``param_groups``, torch's hooks, torch-format state dicts
(:mod:`rlx_gpu.core.torchsd`), ``state`` keyed by the tensors (:mod:`rlx_gpu.core.torchstate`),
``add_param_group``, ``step(closure)``, copies and pickles; every rlx_gpu method as well (``save``, ``restore``,
``params``, ``memory()``, ...). Importing this module imports torch.
"""
from __future__ import annotations

import torch  # noqa: F401  (what these classes subclass)
import torch.optim  # noqa: F401

from .. import optim as _optim
from ..core.torchcontract import flavour
from .partition import Partition as _Partition

__all__ = list(_optim.__all__) + ["Partition"]

for _name in _optim.__all__:
    globals()[_name] = flavour(getattr(_optim, _name))
Partition = flavour(_Partition)
del _name
