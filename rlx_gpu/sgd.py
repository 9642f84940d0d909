"""SGD on the GPU (``shaders/sgd.wgsl``; the update rule is in :mod:`rlx_gpu.reference.sgd`)."""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer
from .reference import sgd as ref

MOMENTUM, NESTEROV, L2, SEED = 4, 8, 16, 32


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum (torch.optim.SGD semantics).

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: learning rate. momentum: momentum factor (the first step seeds the buffer with the grad).
        dampening: dampening for momentum. weight_decay: L2 penalty added to the grad.
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0). maximize: ascend.
        device: adapter selector (see :func:`rlx_gpu.get_device`).
    """
    spec = ref.SGD
    shader = "sgd.wgsl"

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        rec[:, 1] = g["weight_decay"]
        rec[:, 2] = g["momentum"]
        rec[:, 3] = 1 - g["dampening"]
        rec[:, 4] = -g["lr"]
        flags = ((MOMENTUM if g["momentum"] != 0 else 0) | (NESTEROV if g["nesterov"] else 0)
                 | (L2 if g["weight_decay"] != 0 else 0))
        return np.array([flags | (SEED if "momentum_buffer" in f else 0) for f in fresh], np.uint32)
