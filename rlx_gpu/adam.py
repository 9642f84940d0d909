"""Adam and AdamW on the GPU (``shaders/adam.wgsl``; the update rule is in :mod:`rlx_gpu.reference.adam`)."""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer
from .reference import adam as ref

AMSGRAD, DECOUPLED, L2 = 4, 8, 16


class Adam(Optimizer):
    """Adam with L2 weight decay (torch.optim.Adam semantics, names and defaults).

    Args:
        params: dict name -> float32 array, or a list of param-group dicts ``{"params": {...}, "lr": ...}``.
        lr: learning rate. betas: decay rates of the first and second moments. eps: added to the
        denominator after the bias correction of ``sqrt(v)``. weight_decay: L2 penalty added to the grad.
        amsgrad: use the running maximum of ``v``. maximize: ascend instead of descend.
        device: adapter selector (see :func:`rlx_gpu.get_device`), default ``RLX_GPU_ADAPTER`` or the best.
    """
    spec = ref.Adam
    shader = "adam.wgsl"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = wd
        rec[:, 3] = 1 - b1
        rec[:, 4] = b2
        rec[:, 5] = 1 - b2
        rec[:, 6] = -lr / (1 - b1 ** t)
        rec[:, 7] = np.sqrt(1 - b2 ** t)
        rec[:, 8] = g["eps"]
        decay = 0 if wd == 0 else (DECOUPLED if self.spec.decoupled else L2)
        return (AMSGRAD if g["amsgrad"] else 0) | decay


class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay ``p *= 1 - lr*wd`` (torch.optim.AdamW). Args as :class:`Adam`."""
    spec = ref.AdamW

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite)
