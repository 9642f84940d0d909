"""RAdam on the GPU (``shaders/radam.wgsl``; the update rule is in :mod:`rlx_gpu.reference.radam`)."""
from __future__ import annotations

import numpy as np

from .optimizer import Optimizer
from .reference import radam as ref

RECTIFIED, DECOUPLED, L2 = 4, 8, 16


class RAdam(Optimizer):
    """Rectified Adam (torch.optim.RAdam semantics): the rectification term and its rho_t > 5 switch are
    computed per tensor on the host.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr, betas, eps: as Adam. weight_decay: L2 added to the grad, or decoupled ``p *= 1 - lr*wd`` with
        ``decoupled_weight_decay=True``. maximize: ascend. device: adapter selector.
    """
    spec = ref.RAdam
    shader = "radam.wgsl"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)

    def _fill(self, g, t, fresh, rec, sel):
        lr, (b1, b2), wd = g["lr"], g["betas"], g["weight_decay"]
        rho_t, r = ref.radam_rect(b2, t)
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = wd
        rec[:, 3] = 1 - b1
        rec[:, 4] = b2
        rec[:, 5] = 1 - b2
        rec[:, 6] = 1 - b1 ** t
        rec[:, 7] = lr
        rec[:, 8] = np.sqrt(1 - b2 ** t)
        rec[:, 9] = g["eps"]
        rect = rho_t > 5.0
        rec[:, 10] = np.where(rect, r, 0.0)
        decay = 0 if wd == 0 else (DECOUPLED if g["decoupled_weight_decay"] else L2)
        return np.where(rect, RECTIFIED, 0).astype(np.uint32) | decay
